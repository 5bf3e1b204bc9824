package dev.beamkafka.runner;

import java.util.List;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.runners.PipelineRunnerRegistrar;

/**
 * Lets {@code --runner=TestBeamKafkaRunner} be used by name from TestPipeline (listed in
 * META-INF/services). It lives with the tests: the runner's own module carries no test libraries.
 */
public final class TestBeamKafkaRunnerRegistrar implements PipelineRunnerRegistrar {
  @Override
  public Iterable<Class<? extends PipelineRunner<?>>> getPipelineRunners() {
    return List.of(TestBeamKafkaRunner.class);
  }
}
