package dev.beamkafka.runner;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import org.apache.beam.model.jobmanagement.v1.JobApi;
import org.apache.beam.model.pipeline.v1.MetricsApi.BoundedTrie;
import org.apache.beam.model.pipeline.v1.MetricsApi.MonitoringInfo;
import org.apache.beam.runners.core.metrics.BoundedTrieData;
import org.apache.beam.sdk.coders.IterableCoder;
import org.apache.beam.sdk.coders.StringUtf8Coder;
import org.apache.beam.sdk.metrics.BoundedTrieResult;
import org.apache.beam.sdk.metrics.DistributionResult;
import org.apache.beam.sdk.metrics.GaugeResult;
import org.apache.beam.sdk.metrics.MetricFiltering;
import org.apache.beam.sdk.metrics.MetricKey;
import org.apache.beam.sdk.metrics.MetricName;
import org.apache.beam.sdk.metrics.MetricQueryResults;
import org.apache.beam.sdk.metrics.MetricResult;
import org.apache.beam.sdk.metrics.MetricResults;
import org.apache.beam.sdk.metrics.MetricsFilter;
import org.apache.beam.sdk.metrics.StringSetResult;
import org.apache.beam.sdk.util.VarInt;
import org.joda.time.Instant;

/**
 * User metrics from GetJobMetrics: the job server's attempted and committed MonitoringInfos
 * (counters, distributions, gauges, string sets and bounded tries; labels NAMESPACE, NAME and
 * PTRANSFORM) as
 * Beam's {@link MetricResults}. A metric with no committed report has the empty committed value.
 */
public class BeamKafkaMetrics extends MetricResults {
  private static final String USER_PREFIX = "beam:metric:user:";
  private static final String SUM = "beam:metrics:sum_int64:v1";
  private static final String DISTRIBUTION = "beam:metrics:distribution_int64:v1";
  private static final String LATEST = "beam:metrics:latest_int64:v1";
  private static final String STRING_SET = "beam:metrics:set_string:v1";
  private static final String BOUNDED_TRIE = "beam:metrics:bounded_trie:v1";

  private final List<MetricResult<Long>> counters;
  private final List<MetricResult<DistributionResult>> distributions;
  private final List<MetricResult<GaugeResult>> gauges;
  private final List<MetricResult<StringSetResult>> stringSets;
  private final List<MetricResult<BoundedTrieResult>> boundedTries;

  private BeamKafkaMetrics(JobApi.MetricResults m) {
    counters = results(m, SUM, BeamKafkaMetrics::sum, 0L);
    distributions =
        results(m, DISTRIBUTION, BeamKafkaMetrics::distribution, DistributionResult.IDENTITY_ELEMENT);
    gauges = results(m, LATEST, BeamKafkaMetrics::gauge, GaugeResult.empty());
    stringSets = results(m, STRING_SET, BeamKafkaMetrics::stringSet, StringSetResult.empty());
    boundedTries =
        results(m, BOUNDED_TRIE, BeamKafkaMetrics::boundedTrie, BoundedTrieResult.empty());
  }

  public static BeamKafkaMetrics of(JobApi.MetricResults m) {
    return new BeamKafkaMetrics(m);
  }

  @Override
  public MetricQueryResults queryMetrics(MetricsFilter filter) {
    return MetricQueryResults.create(
        matching(counters, filter),
        matching(distributions, filter),
        matching(gauges, filter),
        matching(stringSets, filter),
        matching(boundedTries, filter),
        List.of());
  }

  private static <T> List<MetricResult<T>> matching(List<MetricResult<T>> all, MetricsFilter f) {
    List<MetricResult<T>> out = new ArrayList<>();
    for (MetricResult<T> r : all) {
      if (f == null || MetricFiltering.matches(f, r.getKey())) {
        out.add(r);
      }
    }
    return out;
  }

  /** One result per metric key of the given type: its attempted and committed values. */
  private static <T> List<MetricResult<T>> results(
      JobApi.MetricResults m, String type, Function<MonitoringInfo, T> decode, T empty) {
    Map<MetricKey, T> attempted = byKey(m.getAttemptedList(), type, decode);
    Map<MetricKey, T> committed = byKey(m.getCommittedList(), type, decode);
    List<MetricResult<T>> out = new ArrayList<>();
    for (Map.Entry<MetricKey, T> e : attempted.entrySet()) {
      out.add(MetricResult.create(e.getKey(), committed.getOrDefault(e.getKey(), empty), e.getValue()));
    }
    for (Map.Entry<MetricKey, T> e : committed.entrySet()) {
      if (!attempted.containsKey(e.getKey())) {
        out.add(MetricResult.create(e.getKey(), e.getValue(), e.getValue()));
      }
    }
    return out;
  }

  private static <T> Map<MetricKey, T> byKey(
      List<MonitoringInfo> infos, String type, Function<MonitoringInfo, T> decode) {
    Map<MetricKey, T> out = new LinkedHashMap<>();
    for (MonitoringInfo info : infos) {
      Map<String, String> labels = info.getLabelsMap();
      if (!info.getUrn().startsWith(USER_PREFIX)
          || !type.equals(info.getType())
          || !labels.containsKey("NAMESPACE")
          || !labels.containsKey("NAME")) {
        continue;
      }
      MetricKey key =
          MetricKey.create(
              labels.getOrDefault("PTRANSFORM", ""),
              MetricName.named(labels.get("NAMESPACE"), labels.get("NAME")));
      out.put(key, decode.apply(info));
    }
    return out;
  }

  private static Long sum(MonitoringInfo info) {
    return longs(info, 1)[0];
  }

  private static DistributionResult distribution(MonitoringInfo info) {
    long[] v = longs(info, 4); // count, sum, min, max
    return DistributionResult.create(v[1], v[0], v[2], v[3]);
  }

  private static GaugeResult gauge(MonitoringInfo info) {
    long[] v = longs(info, 2); // timestamp (millis), value
    return GaugeResult.create(v[1], new Instant(v[0]));
  }

  private static StringSetResult stringSet(MonitoringInfo info) {
    try (InputStream in = info.getPayload().newInput()) {
      Iterable<String> values = IterableCoder.of(StringUtf8Coder.of()).decode(in);
      HashSet<String> set = new HashSet<>();
      values.forEach(set::add);
      return StringSetResult.create(set);
    } catch (IOException e) {
      throw new IllegalStateException("Undecodable string set " + info, e);
    }
  }

  private static BoundedTrieResult boundedTrie(MonitoringInfo info) {
    try {
      return BoundedTrieData.fromProto(BoundedTrie.parseFrom(info.getPayload())).extractResult();
    } catch (IOException e) {
      throw new IllegalStateException("Undecodable bounded trie " + info, e);
    }
  }

  private static long[] longs(MonitoringInfo info, int count) {
    long[] out = new long[count];
    try (InputStream in = info.getPayload().newInput()) {
      for (int i = 0; i < count; i++) {
        out[i] = VarInt.decodeLong(in);
      }
    } catch (IOException e) {
      throw new IllegalStateException("Undecodable metric payload " + info, e);
    }
    return out;
  }
}
