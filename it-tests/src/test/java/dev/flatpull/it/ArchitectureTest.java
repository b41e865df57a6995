package dev.flatpull.it;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;

import com.tngtech.archunit.core.domain.JavaClass;
import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The module layering of docs/architecture.md, and each third-party library kept in its one home. */
class ArchitectureTest {
  private static JavaClasses classes;

  @BeforeAll
  static void load() {
    // Modules' test jars (fixtures such as fetcher's BuiltLayer) are test code too.
    classes = new ClassFileImporter().withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
        .withImportOption(location -> !location.contains("-tests.jar"))
        .importPackages("dev.flatpull");
  }

  /**
   * No two packages depend on each other, directly or around a loop, in any module: a cycle is two packages that can
   * only change together (the daemon's meters and the FUSE manager's server formed one).
   */
  @Test
  void packages_formNoCycle() {
    slices().matching("dev.flatpull.(**)").should().beFreeOfCycles().check(classes);
  }

  /** Production code knows nothing of the tests' harness or the benchmarks (which live in their own modules). */
  @Test
  void production_knowsNothingOfTheHarnessOrTheBenchmarks() {
    noClasses().that().resideOutsideOfPackage("dev.flatpull.it..")
        .should().dependOnClassesThat().resideInAPackage("dev.flatpull.it..")
        .check(classes);
  }

  @Test
  void core_dependsOnTheJdkOnly() {
    noClasses().that().resideInAPackage("dev.flatpull.core..")
        .should().dependOnClassesThat().resideOutsideOfPackages("dev.flatpull.core..", "java..")
        .check(classes);
  }

  @Test
  void config_doesNotDependOnHigherModules() {
    noClasses().that().resideInAPackage("dev.flatpull.config..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.fetcher..", "dev.flatpull.snapshotter..",
            "dev.flatpull.manager..", "dev.flatpull.endpoints..")
        .check(classes);
  }

  @Test
  void fetcher_doesNotDependOnTheProcesses() {
    noClasses().that().resideInAPackage("dev.flatpull.fetcher..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.snapshotter..", "dev.flatpull.manager..",
            "dev.flatpull.endpoints..", "dev.flatpull.it..")
        .check(classes);
  }

  /** The processes' shared endpoints (gRPC on unix sockets, Prometheus text) know neither process. */
  @Test
  void endpoints_knowNeitherProcess() {
    noClasses().that().resideInAPackage("dev.flatpull.endpoints..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.snapshotter..", "dev.flatpull.manager..")
        .check(classes);
  }

  /** The FUSE manager's module knows nothing of the daemon, its command line or the composition above it. */
  @Test
  void fuseManager_knowsNothingOfTheDaemon() {
    noClasses().that().resideInAPackage("dev.flatpull.manager..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.snapshotter..", "dev.flatpull.it..")
        .check(classes);
  }

  /**
   * The daemon reaches the FUSE manager only through its client (and the API the client speaks): the manager's
   * server, layers and meters are another process's. The command line and the warm-ups compose both processes.
   */
  @Test
  void daemon_reachesTheManagerOnlyThroughItsClient() {
    noClasses().that().resideInAnyPackage("dev.flatpull.snapshotter.daemon..", "dev.flatpull.snapshotter.overlay..",
            "dev.flatpull.snapshotter.store..", "dev.flatpull.snapshotter.grpc..", "dev.flatpull.snapshotter.remote..",
            "dev.flatpull.snapshotter.record..", "dev.flatpull.snapshotter.metrics..")
        .should().dependOnClassesThat(JavaClass.Predicates.resideInAPackage("dev.flatpull.manager..")
            .and(JavaClass.Predicates.resideOutsideOfPackages("dev.flatpull.manager.client..",
                "dev.flatpull.manager.api..")))
        .check(classes);
  }

  @Test
  void okhttp_livesOnlyInTheRegistryPackage() {
    noClasses().that().resideOutsideOfPackage("dev.flatpull.fetcher.registry..")
        .should().dependOnClassesThat().resideInAnyPackage("okhttp3..", "okio..")
        .check(classes);
  }

  /** Each process's meters in its metrics package, over the shared registry and endpoint. */
  @Test
  void micrometer_livesOnlyInTheMetricsPackages() {
    noClasses().that().resideOutsideOfPackages("dev.flatpull.endpoints.metrics..", "dev.flatpull.snapshotter.metrics..",
            "dev.flatpull.manager.metrics..")
        .should().dependOnClassesThat().resideInAnyPackage("io.micrometer..", "io.prometheus..")
        .check(classes);
  }

  @Test
  void picocli_livesOnlyInTheCli() {
    noClasses().that().resideOutsideOfPackage("dev.flatpull.snapshotter.cli..")
        .should().dependOnClassesThat().resideInAnyPackage("picocli..")
        .check(classes);
  }

  @Test
  void jnrFuse_livesOnlyInTheFuseAdapter() {
    // The benchmarks keep jnr-fuse's own mount (libfuse's loop on its native threads) as a baseline to measure against.
    noClasses().that().resideOutsideOfPackages("dev.flatpull.fuse..", "dev.flatpull.it.bench..")
        .should().dependOnClassesThat().resideInAnyPackage("ru.serce.jnrfuse..", "jnr.ffi..")
        .check(classes);
  }

  @Test
  void caffeine_livesOnlyInThePageCache() {
    noClasses().that().resideOutsideOfPackage("dev.flatpull.pagecache..")
        .should().dependOnClassesThat().resideInAnyPackage("com.github.benmanes.caffeine..")
        .check(classes);
  }

  @Test
  void pageCacheAndFetcher_doNotImportEachOther() {
    noClasses().that().resideInAPackage("dev.flatpull.pagecache..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.fetcher..")
        .check(classes);
    noClasses().that().resideInAPackage("dev.flatpull.fetcher..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.pagecache..")
        .check(classes);
  }

  @Test
  void zstdJni_livesOnlyInTheFormats() {
    // The benchmarks compare the formats with zstd alone, so they call it too.
    noClasses().that().resideOutsideOfPackages("dev.flatpull.fetcher.layer..", "dev.flatpull.fetcher.convert..",
            "dev.flatpull.runtimeimage..", "dev.flatpull.it.bench..")
        .should().dependOnClassesThat().resideInAnyPackage("com.github.luben..")
        .check(classes);
  }

  @Test
  void grpc_livesOnlyInTheApiAdapters() {
    noClasses().that().resideOutsideOfPackages("dev.flatpull.endpoints.grpc..", "dev.flatpull.snapshotter.grpc..",
            "dev.flatpull.snapshotter.api..", "dev.flatpull.snapshotter.warmup..", "dev.flatpull.manager",
            "dev.flatpull.manager.api..", "dev.flatpull.manager.client..", "dev.flatpull.it..")
        .should().dependOnClassesThat().resideInAnyPackage("io.grpc..", "com.google.protobuf..")
        .check(classes);
  }

  @Test
  void sql_livesOnlyInTheMetadataStore() {
    noClasses().that().resideOutsideOfPackage("dev.flatpull.snapshotter.store..")
        .should().dependOnClassesThat().resideInAnyPackage("java.sql..", "org.sqlite..")
        .check(classes);
  }

  @Test
  void snapshotSemantics_doNotKnowHowTheyAreServed() {
    noClasses().that().resideInAnyPackage("dev.flatpull.snapshotter.store..", "dev.flatpull.snapshotter.overlay..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.snapshotter.grpc..",
            "dev.flatpull.snapshotter.remote..", "dev.flatpull.snapshotter.daemon..", "dev.flatpull.snapshotter.cli..",
            "dev.flatpull.manager..", "dev.flatpull.fuse..", "dev.flatpull.fetcher..")
        .check(classes);
    noClasses().that().resideInAPackage("dev.flatpull.snapshotter.store..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.snapshotter.overlay..")
        .check(classes);
  }

  @Test
  void runtimeImageAndFuseMount_sameLevel_doNotImportEachOther() {
    noClasses().that().resideInAPackage("dev.flatpull.runtimeimage..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.fuse..", "dev.flatpull.snapshotter..",
            "dev.flatpull.manager..")
        .check(classes);
    noClasses().that().resideInAPackage("dev.flatpull.fuse..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.runtimeimage..")
        .check(classes);
  }

  @Test
  void traceRecorder_knowsNothingOfHowReadsAreServed() {
    noClasses().that().resideInAPackage("dev.flatpull.trace..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.fuse..", "dev.flatpull.fetcher..",
            "dev.flatpull.pagecache..", "dev.flatpull.snapshotter..", "dev.flatpull.manager..", "dev.flatpull.config..")
        .check(classes);
    noClasses().that().resideInAnyPackage("dev.flatpull.fuse..", "dev.flatpull.fetcher..", "dev.flatpull.pagecache..")
        .should().dependOnClassesThat().resideInAnyPackage("dev.flatpull.trace..")
        .check(classes);
  }
}
