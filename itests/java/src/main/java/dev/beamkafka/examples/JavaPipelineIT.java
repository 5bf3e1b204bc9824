package dev.beamkafka.examples;

import dev.beamkafka.runner.BeamKafkaPipelineOptions;
import dev.beamkafka.runner.BeamKafkaRunner;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.coders.KvCoder;
import org.apache.beam.sdk.coders.StringUtf8Coder;
import org.apache.beam.sdk.coders.VarIntCoder;
import org.apache.beam.sdk.coders.VarLongCoder;
import org.apache.beam.sdk.io.TextIO;
import org.apache.beam.sdk.metrics.Counter;
import org.apache.beam.sdk.metrics.MetricNameFilter;
import org.apache.beam.sdk.metrics.MetricResult;
import org.apache.beam.sdk.metrics.Metrics;
import org.apache.beam.sdk.metrics.MetricsFilter;
import org.apache.beam.sdk.options.Description;
import org.apache.beam.sdk.options.PipelineOptionsFactory;
import org.apache.beam.sdk.options.Validation;
import org.apache.beam.sdk.state.StateSpec;
import org.apache.beam.sdk.state.StateSpecs;
import org.apache.beam.sdk.state.TimeDomain;
import org.apache.beam.sdk.state.Timer;
import org.apache.beam.sdk.state.TimerSpec;
import org.apache.beam.sdk.state.TimerSpecs;
import org.apache.beam.sdk.state.ValueState;
import org.apache.beam.sdk.transforms.Create;
import org.apache.beam.sdk.transforms.DoFn;
import org.apache.beam.sdk.transforms.Flatten;
import org.apache.beam.sdk.transforms.GroupByKey;
import org.apache.beam.sdk.transforms.Max;
import org.apache.beam.sdk.transforms.ParDo;
import org.apache.beam.sdk.transforms.Sum;
import org.apache.beam.sdk.transforms.Values;
import org.apache.beam.sdk.transforms.View;
import org.apache.beam.sdk.values.KV;
import org.apache.beam.sdk.values.PCollection;
import org.apache.beam.sdk.values.PCollectionList;
import org.apache.beam.sdk.values.PCollectionView;
import org.apache.beam.sdk.values.TimestampedValue;
import org.joda.time.Duration;
import org.joda.time.Instant;

/**
 * A Java pipeline for itests/test_java_pipelines.py: per-user events (user:amount:millis) through
 * GroupByKey, Combine.perKey (Sum), a singleton side input (the largest total) and a stateful
 * DoFn with a ValueState and an event-time timer, written with TextIO as lines:
 *
 * <pre>
 *   total USER SUM top=true|false     (Sum.integersPerKey, side input: SUM == largest total)
 *   group USER A,B,...                (GroupByKey, amounts sorted)
 *   timer USER sum=S count=N at=MILLIS (state and a timer at the user's last event + 1 min)
 * </pre>
 *
 * Prints "state STATE" and "metric events attempted=A committed=C" (a user counter) on stdout.
 */
public class JavaPipelineIT {
  static final Duration TIMER_DELAY = Duration.standardMinutes(1);

  public interface Options extends BeamKafkaPipelineOptions {
    @Description("Events as user:amount:timestampMillis, comma separated.")
    @Validation.Required
    String getEvents();

    void setEvents(String value);

    @Description("Prefix of the output text file(s).")
    @Validation.Required
    String getOutput();

    void setOutput(String value);
  }

  public static void main(String[] args) {
    if (Arrays.stream(args).noneMatch(a -> a.startsWith("--runner"))) {
      // Before validation, which needs a runner (the default DirectRunner is not here).
      args = Stream.concat(Stream.of("--runner=" + BeamKafkaRunner.class.getName()), Arrays.stream(args))
          .toArray(String[]::new);
    }
    Options options = PipelineOptionsFactory.fromArgs(args).withValidation().as(Options.class);
    Pipeline p = Pipeline.create(options);
    build(p, parseEvents(options.getEvents()), options.getOutput());
    PipelineResult result = p.run();
    PipelineResult.State state = result.waitUntilFinish();
    System.out.println("state " + state);
    for (MetricResult<Long> c :
        result
            .metrics()
            .queryMetrics(
                MetricsFilter.builder()
                    .addNameFilter(MetricNameFilter.named(JavaPipelineIT.class, "events"))
                    .build())
            .getCounters()) {
      System.out.println(
          "metric events attempted=" + c.getAttempted() + " committed=" + c.getCommitted());
    }
    System.exit(state == PipelineResult.State.DONE ? 0 : 1);
  }

  static List<TimestampedValue<KV<String, Integer>>> parseEvents(String text) {
    List<TimestampedValue<KV<String, Integer>>> out = new ArrayList<>();
    for (String event : text.split(",")) {
      String[] f = event.trim().split(":");
      out.add(
          TimestampedValue.of(
              KV.of(f[0], Integer.parseInt(f[1])), new Instant(Long.parseLong(f[2]))));
    }
    return out;
  }

  static void build(Pipeline p, List<TimestampedValue<KV<String, Integer>>> events, String output) {
    PCollection<KV<String, Integer>> input =
        p.apply(
                "Events",
                Create.timestamped(events)
                    .withCoder(KvCoder.of(StringUtf8Coder.of(), VarIntCoder.of())))
            .apply("CountEvents", ParDo.of(new CountFn()));

    PCollection<KV<String, Integer>> totals = input.apply("Sum", Sum.integersPerKey());
    PCollectionView<Integer> largest =
        totals
            .apply("Totals", Values.create())
            .apply("Largest", Max.integersGlobally())
            .apply("AsSingleton", View.asSingleton());
    PCollection<String> totalLines =
        totals.apply(
            "FormatTotals",
            ParDo.of(
                    new DoFn<KV<String, Integer>, String>() {
                      @ProcessElement
                      public void process(ProcessContext c) {
                        KV<String, Integer> kv = c.element();
                        boolean top = kv.getValue().equals(c.sideInput(largest));
                        c.output("total " + kv.getKey() + " " + kv.getValue() + " top=" + top);
                      }
                    })
                .withSideInputs(largest));

    PCollection<String> groupLines =
        input
            .apply("Group", GroupByKey.create())
            .apply(
                "FormatGroups",
                ParDo.of(
                    new DoFn<KV<String, Iterable<Integer>>, String>() {
                      @ProcessElement
                      public void process(
                          @Element KV<String, Iterable<Integer>> kv, OutputReceiver<String> out) {
                        String amounts =
                            StreamSupport.stream(kv.getValue().spliterator(), false)
                                .sorted()
                                .map(String::valueOf)
                                .collect(Collectors.joining(","));
                        out.output("group " + kv.getKey() + " " + amounts);
                      }
                    }));

    PCollection<String> timerLines = input.apply("StateAndTimer", ParDo.of(new SumUntilQuietFn()));

    PCollectionList.of(totalLines)
        .and(groupLines)
        .and(timerLines)
        .apply("All", Flatten.pCollections())
        .apply("Write", TextIO.write().to(output).withSuffix(".txt").withNumShards(1));
  }

  /** Counts the events in a user counter (namespace JavaPipelineIT, name events). */
  static class CountFn extends DoFn<KV<String, Integer>, KV<String, Integer>> {
    private final Counter events = Metrics.counter(JavaPipelineIT.class, "events");

    @ProcessElement
    public void process(@Element KV<String, Integer> e, OutputReceiver<KV<String, Integer>> out) {
      events.inc();
      out.output(e);
    }
  }

  /**
   * Sums a user's amounts in a ValueState and, once event time passes the user's last event plus
   * TIMER_DELAY, outputs the sum from an event-time timer.
   */
  static class SumUntilQuietFn extends DoFn<KV<String, Integer>, String> {
    @StateId("sum")
    private final StateSpec<ValueState<Integer>> sumSpec = StateSpecs.value(VarIntCoder.of());

    @StateId("count")
    private final StateSpec<ValueState<Integer>> countSpec = StateSpecs.value(VarIntCoder.of());

    @StateId("last")
    private final StateSpec<ValueState<Long>> lastSpec = StateSpecs.value(VarLongCoder.of());

    @TimerId("quiet")
    private final TimerSpec quietSpec = TimerSpecs.timer(TimeDomain.EVENT_TIME);

    @ProcessElement
    public void process(
        @Element KV<String, Integer> e,
        @Timestamp Instant timestamp,
        @StateId("sum") ValueState<Integer> sum,
        @StateId("count") ValueState<Integer> count,
        @StateId("last") ValueState<Long> last,
        @TimerId("quiet") Timer quiet) {
      sum.write(orZero(sum.read()) + e.getValue());
      count.write(orZero(count.read()) + 1);
      Long previous = last.read();
      long latest = Math.max(previous == null ? Long.MIN_VALUE : previous, timestamp.getMillis());
      last.write(latest);
      quiet.set(new Instant(latest).plus(TIMER_DELAY));
    }

    @OnTimer("quiet")
    public void onQuiet(
        @Key String user,
        @Timestamp Instant firedAt,
        @StateId("sum") ValueState<Integer> sum,
        @StateId("count") ValueState<Integer> count,
        OutputReceiver<String> out) {
      out.output(
          "timer "
              + user
              + " sum="
              + sum.read()
              + " count="
              + count.read()
              + " at="
              + firedAt.getMillis());
    }

    private static int orZero(Integer v) {
      return v == null ? 0 : v;
    }
  }
}
