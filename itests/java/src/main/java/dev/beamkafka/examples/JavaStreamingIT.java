package dev.beamkafka.examples;

import dev.beamkafka.runner.BeamKafkaPipelineOptions;
import dev.beamkafka.runner.BeamKafkaPipelineResult;
import dev.beamkafka.runner.BeamKafkaRunner;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.io.GenerateSequence;
import org.apache.beam.sdk.metrics.Counter;
import org.apache.beam.sdk.metrics.MetricNameFilter;
import org.apache.beam.sdk.metrics.MetricResult;
import org.apache.beam.sdk.metrics.Metrics;
import org.apache.beam.sdk.metrics.MetricsFilter;
import org.apache.beam.sdk.options.Default;
import org.apache.beam.sdk.options.Description;
import org.apache.beam.sdk.options.PipelineOptionsFactory;
import org.apache.beam.sdk.transforms.DoFn;
import org.apache.beam.sdk.transforms.ParDo;
import org.joda.time.Duration;

/**
 * An unbounded Java pipeline for itests/test_java_pipelines.py: GenerateSequence (an unbounded
 * source, run as a splittable DoFn) counted by a user counter, which never ends by itself. Waits
 * until the job's live metrics show --minTicks elements, then cancels it. Prints "ticks N" (the
 * attempted count it saw) and "state STATE" (what cancel() returned).
 */
public class JavaStreamingIT {
  public interface Options extends BeamKafkaPipelineOptions {
    @Description("Elements the live metrics must show before the job is cancelled.")
    @Default.Integer(5)
    int getMinTicks();

    void setMinTicks(int value);

    @Description("Longest wait for them, in seconds.")
    @Default.Integer(90)
    int getWaitSeconds();

    void setWaitSeconds(int value);

    @Description(
        "Submit the job, print \"job ID\" and exit at once, leaving it running (its harnesses must "
            + "be the job server's: --defaultEnvironmentType=DOCKER).")
    @Default.Boolean(false)
    boolean getDetach();

    void setDetach(boolean value);
  }

  public static void main(String[] args) throws Exception {
    Options options = PipelineOptionsFactory.fromArgs(args).as(Options.class);
    options.setRunner(BeamKafkaRunner.class);
    Pipeline p = Pipeline.create(options);
    p.apply("Ticks", GenerateSequence.from(0).withRate(20, Duration.standardSeconds(1)))
        .apply("Count", ParDo.of(new CountFn()));
    PipelineResult result = p.run();
    if (options.getDetach()) {
      System.out.println("job " + ((BeamKafkaPipelineResult) result).getJobId());
      System.exit(0);
    }

    long ticks = 0;
    long deadline = System.nanoTime() + options.getWaitSeconds() * 1_000_000_000L;
    while (ticks < options.getMinTicks() && System.nanoTime() < deadline) {
      Thread.sleep(500);
      ticks = attemptedTicks(result);
    }
    System.out.println("ticks " + ticks);
    PipelineResult.State state = result.cancel();
    System.out.println("state " + state);
    System.exit(state == PipelineResult.State.CANCELLED ? 0 : 1);
  }

  private static long attemptedTicks(PipelineResult result) {
    long total = 0;
    for (MetricResult<Long> c :
        result
            .metrics()
            .queryMetrics(
                MetricsFilter.builder()
                    .addNameFilter(MetricNameFilter.named(JavaStreamingIT.class, "ticks"))
                    .build())
            .getCounters()) {
      total += c.getAttempted();
    }
    return total;
  }

  static class CountFn extends DoFn<Long, Long> {
    private final Counter ticks = Metrics.counter(JavaStreamingIT.class, "ticks");

    @ProcessElement
    public void process(@Element Long n, OutputReceiver<Long> out) {
      ticks.inc();
      out.output(n);
    }
  }
}
