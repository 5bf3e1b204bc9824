package dev.beamkafka.runner;

import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.beam.fn.harness.ExternalWorkerService;
import org.apache.beam.model.jobmanagement.v1.ArtifactStagingServiceGrpc;
import org.apache.beam.model.jobmanagement.v1.JobApi.PrepareJobRequest;
import org.apache.beam.model.jobmanagement.v1.JobApi.PrepareJobResponse;
import org.apache.beam.model.jobmanagement.v1.JobApi.RunJobRequest;
import org.apache.beam.model.jobmanagement.v1.JobServiceGrpc;
import org.apache.beam.model.jobmanagement.v1.JobServiceGrpc.JobServiceBlockingStub;
import org.apache.beam.model.pipeline.v1.Endpoints.ApiServiceDescriptor;
import org.apache.beam.model.pipeline.v1.RunnerApi;
import org.apache.beam.runners.fnexecution.artifact.ArtifactRetrievalService;
import org.apache.beam.runners.fnexecution.artifact.ArtifactStagingService;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.fn.channel.ManagedChannelFactory;
import org.apache.beam.sdk.fn.server.GrpcFnServer;
import org.apache.beam.sdk.fn.server.ServerFactory;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.options.SdkHarnessOptions;
import org.apache.beam.sdk.util.construction.Environments;
import org.apache.beam.sdk.util.construction.PipelineOptionsTranslation;
import org.apache.beam.sdk.util.construction.PipelineTranslation;
import org.apache.beam.sdk.util.construction.SdkComponents;
import org.apache.beam.sdk.util.construction.resources.PipelineResources;
import org.apache.beam.vendor.grpc.v1p69p0.io.grpc.ManagedChannel;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs a Java pipeline on a beam-kafka job server through Beam's Job API.
 *
 * <p>By default (environment type unset or LOOPBACK) the SDK harnesses are threads of this JVM: an
 * {@link ExternalWorkerService} listens on a free local port and the pipeline's environment is
 * {@code beam:env:external:v1} pointing at it, so the job needs no artifacts (the harnesses share
 * this JVM's classpath), and it ends with this JVM. An EXTERNAL environment the user configured is
 * kept. With {@code --defaultEnvironmentType=DOCKER} (Beam's Java SDK image) this JVM's classpath
 * is staged to the job server, which runs Beam's Java harness itself (as a Java process given
 * {@code --java-harness-dir}, or the image): the job outlives the program that submitted it.
 */
public class BeamKafkaRunner extends PipelineRunner<PipelineResult> {
  private static final Logger LOG = LoggerFactory.getLogger(BeamKafkaRunner.class);

  /**
   * gRPC's report of channels collected without a shutdown. Beam's harness leaves channels to the
   * garbage collector, so every job printed it, with a stack trace, as a job warning: off in the
   * harness unless the user's --sdkHarnessLogLevelOverrides says otherwise.
   */
  private static final String ORPHAN_CHANNELS =
      "org.apache.beam.vendor.grpc.v1p69p0.io.grpc.internal.ManagedChannelOrphanWrapper";

  /**
   * The same report in this JVM (LOOPBACK harnesses run here, and a channel may be collected
   * before a harness set its levels or after it reset them): held, since java.util.logging keeps
   * loggers weakly and a collected one would forget its filter.
   */
  private static final java.util.logging.Logger ORPHAN_LOGGER =
      java.util.logging.Logger.getLogger(ORPHAN_CHANNELS);

  static final String DEFAULT_JOB_ENDPOINT = "localhost:8099";

  private final BeamKafkaPipelineOptions options;

  protected BeamKafkaRunner(BeamKafkaPipelineOptions options) {
    this.options = options;
  }

  public static BeamKafkaRunner fromOptions(PipelineOptions options) {
    return new BeamKafkaRunner(options.as(BeamKafkaPipelineOptions.class));
  }

  @Override
  public BeamKafkaPipelineResult run(Pipeline pipeline) {
    quietOrphanChannels();
    AutoCloseable workerPool = startWorkerPoolIfLoopback();
    try {
      boolean staged = stagesClasspath();
      if (staged) {
        // Directories on the classpath become jars; the environment lists every file.
        PipelineResources.prepareFilesForStaging(options);
      } else {
        // The environment's dependencies come from filesToStage: none, as nothing is staged.
        options.setFilesToStage(List.of());
      }
      RunnerApi.Pipeline proto = PipelineTranslation.toProto(pipeline, SdkComponents.create(options));
      String endpoint = options.getJobEndpoint();
      if (endpoint == null || endpoint.isEmpty()) {
        endpoint = DEFAULT_JOB_ENDPOINT;
      }
      ManagedChannel channel =
          ManagedChannelFactory.createDefault()
              .forDescriptor(ApiServiceDescriptor.newBuilder().setUrl(endpoint).build());
      try {
        JobServiceBlockingStub jobService = JobServiceGrpc.newBlockingStub(channel);
        int timeout = options.getJobServerTimeout();
        PrepareJobResponse prepared =
            jobService
                .withDeadlineAfter(timeout, TimeUnit.SECONDS)
                .withWaitForReady()
                .prepare(
                    PrepareJobRequest.newBuilder()
                        .setJobName(options.getJobName())
                        .setPipeline(proto)
                        .setPipelineOptions(PipelineOptionsTranslation.toProto(options))
                        .build());
        // Harnesses of an EXTERNAL environment bring their own classpath; the job server's own
        // harnesses get this JVM's, staged here.
        if (staged) {
          stage(prepared);
        }
        String jobId =
            jobService
                .withDeadlineAfter(timeout, TimeUnit.SECONDS)
                .run(
                    RunJobRequest.newBuilder()
                        .setPreparationId(prepared.getPreparationId())
                        .build())
                .getJobId();
        LOG.info("Submitted job {} to the beam-kafka job server at {}", jobId, endpoint);
        return new BeamKafkaPipelineResult(jobId, channel, workerPool, timeout);
      } catch (RuntimeException e) {
        channel.shutdownNow();
        throw e;
      }
    } catch (RuntimeException e) {
      closeQuietly(workerPool);
      throw e;
    }
  }

  /** Starts this JVM's worker pool for a LOOPBACK (or unset) environment; null otherwise. */
  private AutoCloseable startWorkerPoolIfLoopback() {
    String type = options.getDefaultEnvironmentType();
    if (type == null || type.isEmpty() || Environments.ENVIRONMENT_LOOPBACK.equals(type)) {
      GrpcFnServer<ExternalWorkerService> pool;
      try {
        pool =
            GrpcFnServer.allocatePortAndCreateFor(
                new ExternalWorkerService(options), ServerFactory.createDefault());
      } catch (Exception e) {
        throw new RuntimeException("Cannot start the SDK worker pool of this JVM", e);
      }
      options.setDefaultEnvironmentType(Environments.ENVIRONMENT_EXTERNAL);
      options.setDefaultEnvironmentConfig(pool.getApiServiceDescriptor().getUrl());
      LOG.info("SDK harnesses run in this JVM, pool at {}", pool.getApiServiceDescriptor().getUrl());
      return pool;
    }
    if (!Environments.ENVIRONMENT_EXTERNAL.equals(type)
        && !Environments.ENVIRONMENT_DOCKER.equals(type)) {
      throw new IllegalArgumentException(
          "BeamKafkaRunner supports the LOOPBACK, EXTERNAL and DOCKER (Beam's Java SDK image, which "
              + "the job server runs as a Java process) environments, not "
              + type);
    }
    return null;
  }

  private void quietOrphanChannels() {
    SdkHarnessOptions harness = options.as(SdkHarnessOptions.class);
    SdkHarnessOptions.SdkHarnessLogLevelOverrides overrides =
        harness.getSdkHarnessLogLevelOverrides();
    if (overrides == null) {
      overrides = new SdkHarnessOptions.SdkHarnessLogLevelOverrides();
    }
    if (!overrides.containsKey(ORPHAN_CHANNELS)) {
      overrides.addOverrideForName(ORPHAN_CHANNELS, SdkHarnessOptions.LogLevel.OFF);
      // A filter, not a level: a harness's logging set-up resets levels, and keeps filters.
      ORPHAN_LOGGER.setFilter(record -> false);
    }
    harness.setSdkHarnessLogLevelOverrides(overrides);
  }

  private boolean stagesClasspath() {
    return Environments.ENVIRONMENT_DOCKER.equals(options.getDefaultEnvironmentType());
  }

  /** Offers every staged file to the job server, which fetches what the environment needs. */
  private void stage(PrepareJobResponse prepared) {
    String url = prepared.getArtifactStagingEndpoint().getUrl();
    ManagedChannel staging =
        ManagedChannelFactory.createDefault()
            .forDescriptor(ApiServiceDescriptor.newBuilder().setUrl(url).build());
    try {
      ArtifactStagingService.offer(
          new ArtifactRetrievalService(),
          ArtifactStagingServiceGrpc.newStub(staging),
          prepared.getStagingSessionToken());
      LOG.info("Staged {} files to {}", options.getFilesToStage().size(), url);
    } catch (ExecutionException e) {
      throw new RuntimeException("Cannot stage this program's classpath to " + url, e.getCause());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RuntimeException("Interrupted while staging to " + url, e);
    } finally {
      staging.shutdownNow();
    }
  }

  static void closeQuietly(AutoCloseable c) {
    if (c == null) {
      return;
    }
    try {
      c.close();
    } catch (Exception e) {
      LOG.warn("Error closing {}", c, e);
    }
  }

  @Override
  public String toString() {
    return "BeamKafkaRunner#" + hashCode();
  }
}
