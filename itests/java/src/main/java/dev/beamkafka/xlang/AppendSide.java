package dev.beamkafka.xlang;

import org.apache.beam.sdk.transforms.DoFn;
import org.apache.beam.sdk.transforms.PTransform;
import org.apache.beam.sdk.transforms.ParDo;
import org.apache.beam.sdk.values.PCollection;
import org.apache.beam.sdk.values.PCollectionView;

/** Each element followed by the singleton side input's value. */
class AppendSide extends PTransform<PCollection<String>, PCollection<String>> {
  private final PCollectionView<String> side;

  AppendSide(PCollectionView<String> side) {
    this.side = side;
  }

  @Override
  public PCollection<String> expand(PCollection<String> in) {
    return in.apply(
        ParDo.of(
                new DoFn<String, String>() {
                  @ProcessElement
                  public void process(ProcessContext c) {
                    c.output(c.element() + c.sideInput(side));
                  }
                })
            .withSideInputs(side));
  }
}
