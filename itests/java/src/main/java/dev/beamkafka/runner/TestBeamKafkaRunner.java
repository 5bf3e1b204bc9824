package dev.beamkafka.runner;

import java.util.UUID;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.PipelineResult.State;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.metrics.MetricNameFilter;
import org.apache.beam.sdk.metrics.MetricQueryResults;
import org.apache.beam.sdk.metrics.MetricResult;
import org.apache.beam.sdk.metrics.MetricsFilter;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.testing.PAssert;
import org.apache.beam.sdk.testing.TestPipelineOptions;
import org.joda.time.Duration;

/**
 * {@link BeamKafkaRunner} for Beam's TestPipeline: runs the pipeline to its end and fails unless
 * it ended DONE (else a PipelineExecutionException, as p.run() throws elsewhere) and every PAssert
 * of it ran and succeeded, counted by PAssert's own counters (so an assertion the runner silently
 * skipped fails the test too). Each run without an applicationId gets a unique one, so tests never
 * share Kafka topics. A job still running near TestPipeline's --testTimeoutSeconds is cancelled.
 */
public class TestBeamKafkaRunner extends PipelineRunner<PipelineResult> {
  /** How long a test pipeline may run when TestPipelineOptions.testTimeoutSeconds is null. */
  static final long DEFAULT_TIMEOUT_SECONDS = 900;

  private final BeamKafkaPipelineOptions options;

  private TestBeamKafkaRunner(BeamKafkaPipelineOptions options) {
    this.options = options;
  }

  public static TestBeamKafkaRunner fromOptions(PipelineOptions options) {
    return new TestBeamKafkaRunner(options.as(BeamKafkaPipelineOptions.class));
  }

  @Override
  public PipelineResult run(Pipeline pipeline) {
    if (options.getApplicationId() == null || options.getApplicationId().isEmpty()) {
      options.setApplicationId(uniqueApplicationId(options.getJobName()));
    }
    BeamKafkaPipelineResult result = BeamKafkaRunner.fromOptions(options).run(pipeline);
    // Cancel a little before TestPipeline's own timeout abandons the test, so no job is left behind.
    Long limit = options.as(TestPipelineOptions.class).getTestTimeoutSeconds();
    long seconds = limit == null ? DEFAULT_TIMEOUT_SECONDS : Math.max(10, limit - 15);
    State state = result.waitUntilFinish(Duration.standardSeconds(seconds));
    if (state == null) {
      State after = cancel(result);
      throw new AssertionError(
          String.format(
              "Job %s did not end within %d s (then cancelled: %s)",
              result.getJobId(), seconds, after));
    }
    if (state != State.DONE) {
      // Like p.run() on other runners: a failed job is an exception (tests catch it), a PAssert
      // that did not hold is an AssertionError.
      throw new Pipeline.PipelineExecutionException(
          new RuntimeException(
              "Job "
                  + result.getJobId()
                  + " ended "
                  + state
                  + ", not DONE:\n"
                  + String.join("\n", result.getErrors())));
    }
    int expected = PAssert.countAsserts(pipeline);
    long successes = passertCounter(result, PAssert.SUCCESS_COUNTER);
    long failures = passertCounter(result, PAssert.FAILURE_COUNTER);
    if (failures > 0) {
      throw new AssertionError(failures + " PAssert assertion(s) failed in " + result.getJobId());
    }
    if (successes != expected) {
      throw new AssertionError(
          String.format(
              "Job %s ended DONE but %d PAssert assertion(s) succeeded where the pipeline has %d",
              result.getJobId(), successes, expected));
    }
    return result;
  }

  private static State cancel(BeamKafkaPipelineResult result) {
    try {
      return result.cancel();
    } catch (RuntimeException e) {
      return State.UNKNOWN;
    }
  }

  /** The committed total of one of PAssert's counters over all steps. */
  private static long passertCounter(PipelineResult result, String name) {
    MetricQueryResults q =
        result
            .metrics()
            .queryMetrics(
                MetricsFilter.builder()
                    .addNameFilter(MetricNameFilter.named(PAssert.class, name))
                    .build());
    long total = 0;
    for (MetricResult<Long> c : q.getCounters()) {
      total += c.getCommitted();
    }
    return total;
  }

  /** Letters, digits, '.', '_' and '-' only, starting with a letter (a Kafka topic prefix). */
  static String uniqueApplicationId(String jobName) {
    String base = jobName == null ? "" : jobName.replaceAll("[^A-Za-z0-9._-]+", "-");
    if (base.length() > 40) {
      base = base.substring(0, 40);
    }
    return "java-" + base + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  @Override
  public String toString() {
    return "TestBeamKafkaRunner#" + hashCode();
  }
}
