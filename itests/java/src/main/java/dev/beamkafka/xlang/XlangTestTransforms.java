package dev.beamkafka.xlang;

import java.util.Map;
import org.apache.beam.sdk.expansion.ExternalTransformRegistrar;
import org.apache.beam.sdk.transforms.Combine;
import org.apache.beam.sdk.transforms.ExternalTransformBuilder;
import org.apache.beam.sdk.transforms.Flatten;
import org.apache.beam.sdk.transforms.GroupByKey;
import org.apache.beam.sdk.transforms.MapElements;
import org.apache.beam.sdk.transforms.PTransform;
import org.apache.beam.sdk.transforms.Sum;
import org.apache.beam.sdk.transforms.View;
import org.apache.beam.sdk.values.KV;
import org.apache.beam.sdk.values.PCollection;
import org.apache.beam.sdk.values.PCollectionList;
import org.apache.beam.sdk.values.PCollectionTuple;
import org.apache.beam.sdk.values.PCollectionView;
import org.apache.beam.sdk.values.TupleTag;
import org.apache.beam.sdk.values.TypeDescriptors;

/**
 * The Java transforms Beam's Go cross-language tests ({@code sdks/go/test/integration/xlang}) ask an
 * expansion service for, under the URNs and input and output names those tests use. Beam's own
 * test expansion service is not published to Maven Central; this one behaves as the tests expect,
 * and is found by Beam's {@code ExpansionService} through the service loader. Run it with this
 * module's classpath: {@code java -cp ... org.apache.beam.sdk.expansion.service.ExpansionService
 * PORT}.
 */
public class XlangTestTransforms implements ExternalTransformRegistrar {
  private static final String PREFIX = "beam:transforms:xlang:test:";

  /** The Prefix transform's payload: the text put before each element. */
  public static class PrefixConfig {
    String data = "";

    public void setData(String data) {
      this.data = data;
    }
  }

  /** The payload of the transforms that take none. */
  public static class NoConfig {}

  @Override
  public Map<String, ExternalTransformBuilder<?, ?, ?>> knownBuilderInstances() {
    return Map.of(
        PREFIX + "prefix", new PrefixBuilder(),
        PREFIX + "multi", new MultiBuilder(),
        PREFIX + "gbk", new GroupByKeyBuilder(),
        PREFIX + "cgbk", new CoGroupByKeyBuilder(),
        PREFIX + "compk", new SumPerKeyBuilder(),
        PREFIX + "comgl", new SumGloballyBuilder(),
        PREFIX + "flatten", new FlattenBuilder(),
        PREFIX + "partition", new PartitionBuilder());
  }

  static class PrefixBuilder
      implements ExternalTransformBuilder<PrefixConfig, PCollection<String>, PCollection<String>> {
    @Override
    public PTransform<PCollection<String>, PCollection<String>> buildExternal(PrefixConfig config) {
      String prefix = config.data;
      return new PTransform<PCollection<String>, PCollection<String>>() {
        @Override
        public PCollection<String> expand(PCollection<String> in) {
          return in.apply(MapElements.into(TypeDescriptors.strings()).via((String s) -> prefix + s));
        }
      };
    }
  }

  /** main1 and main2 each followed by the singleton side; the side followed by itself. */
  static class MultiBuilder
      implements ExternalTransformBuilder<NoConfig, PCollectionTuple, PCollectionTuple> {
    @Override
    public PTransform<PCollectionTuple, PCollectionTuple> buildExternal(NoConfig config) {
      return new PTransform<PCollectionTuple, PCollectionTuple>() {
        @Override
        public PCollectionTuple expand(PCollectionTuple in) {
          PCollection<String> side = in.get(new TupleTag<String>("side"));
          PCollectionView<String> view = side.apply("SideView", View.asSingleton());
          PCollection<String> mains =
              PCollectionList.of(in.get(new TupleTag<String>("main1")))
                  .and(in.get(new TupleTag<String>("main2")))
                  .apply("Mains", Flatten.pCollections());
          PCollection<String> main = mains.apply("WithSide", new AppendSide(view));
          PCollection<String> sideOut = side.apply("SideWithSide", new AppendSide(view));
          return PCollectionTuple.of(new TupleTag<String>("main"), main)
              .and(new TupleTag<String>("side"), sideOut);
        }
      };
    }
  }

  static class GroupByKeyBuilder
      implements ExternalTransformBuilder<
          NoConfig, PCollection<KV<String, Long>>, PCollection<KV<String, Iterable<Long>>>> {
    @Override
    public PTransform<PCollection<KV<String, Long>>, PCollection<KV<String, Iterable<Long>>>>
        buildExternal(NoConfig config) {
      return GroupByKey.create();
    }
  }

  /** Both inputs' values per key, in one iterable (Go reads it as a one-input CoGBK). */
  static class CoGroupByKeyBuilder
      implements ExternalTransformBuilder<
          NoConfig, PCollectionTuple, PCollection<KV<Long, Iterable<String>>>> {
    @Override
    public PTransform<PCollectionTuple, PCollection<KV<Long, Iterable<String>>>> buildExternal(
        NoConfig config) {
      return new PTransform<PCollectionTuple, PCollection<KV<Long, Iterable<String>>>>() {
        @Override
        public PCollection<KV<Long, Iterable<String>>> expand(PCollectionTuple in) {
          return PCollectionList.of(in.get(new TupleTag<KV<Long, String>>("col1")))
              .and(in.get(new TupleTag<KV<Long, String>>("col2")))
              .apply("Both", Flatten.pCollections())
              .apply("Group", GroupByKey.create());
        }
      };
    }
  }

  static class SumPerKeyBuilder
      implements ExternalTransformBuilder<
          NoConfig, PCollection<KV<String, Long>>, PCollection<KV<String, Long>>> {
    @Override
    public PTransform<PCollection<KV<String, Long>>, PCollection<KV<String, Long>>> buildExternal(
        NoConfig config) {
      return Sum.longsPerKey();
    }
  }

  static class SumGloballyBuilder
      implements ExternalTransformBuilder<NoConfig, PCollection<Long>, PCollection<Long>> {
    @Override
    public PTransform<PCollection<Long>, PCollection<Long>> buildExternal(NoConfig config) {
      return Combine.globally(Sum.ofLongs());
    }
  }

  static class FlattenBuilder
      implements ExternalTransformBuilder<NoConfig, PCollectionTuple, PCollection<Long>> {
    @Override
    public PTransform<PCollectionTuple, PCollection<Long>> buildExternal(NoConfig config) {
      return new PTransform<PCollectionTuple, PCollection<Long>>() {
        @Override
        public PCollection<Long> expand(PCollectionTuple in) {
          PCollectionList<Long> all = PCollectionList.empty(in.getPipeline());
          for (PCollection<?> pc : in.getAll().values()) {
            @SuppressWarnings("unchecked")
            PCollection<Long> longs = (PCollection<Long>) pc;
            all = all.and(longs);
          }
          return all.apply("Flatten", Flatten.pCollections());
        }
      };
    }
  }

  /** Even numbers to output "0", odd ones to "1". */
  static class PartitionBuilder
      implements ExternalTransformBuilder<NoConfig, PCollection<Long>, PCollectionTuple> {
    @Override
    public PTransform<PCollection<Long>, PCollectionTuple> buildExternal(NoConfig config) {
      return new PTransform<PCollection<Long>, PCollectionTuple>() {
        @Override
        public PCollectionTuple expand(PCollection<Long> in) {
          PCollectionList<Long> parts =
              in.apply(
                  "Parity",
                  org.apache.beam.sdk.transforms.Partition.of(2, (n, count) -> (int) (n % 2)));
          return PCollectionTuple.of(new TupleTag<Long>("0"), parts.get(0))
              .and(new TupleTag<Long>("1"), parts.get(1));
        }
      };
    }
  }
}
