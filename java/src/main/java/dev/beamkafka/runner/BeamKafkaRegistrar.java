package dev.beamkafka.runner;

import java.util.List;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.options.PipelineOptionsRegistrar;
import org.apache.beam.sdk.runners.PipelineRunnerRegistrar;

/**
 * Lets {@code --runner=BeamKafkaRunner} and the runner's options be used by name from the command
 * line (listed in META-INF/services).
 */
public final class BeamKafkaRegistrar {
  private BeamKafkaRegistrar() {}

  public static final class Runner implements PipelineRunnerRegistrar {
    @Override
    public Iterable<Class<? extends PipelineRunner<?>>> getPipelineRunners() {
      return List.of(BeamKafkaRunner.class);
    }
  }

  public static final class Options implements PipelineOptionsRegistrar {
    @Override
    public Iterable<Class<? extends PipelineOptions>> getPipelineOptions() {
      return List.of(BeamKafkaPipelineOptions.class);
    }
  }
}
