package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import dev.flatpull.config.ContainerdConfig;
import dev.flatpull.config.FlatpullConfig;
import io.fabric8.kubernetes.api.model.ConfigMap;
import io.fabric8.kubernetes.api.model.Container;
import io.fabric8.kubernetes.api.model.HasMetadata;
import io.fabric8.kubernetes.api.model.Namespace;
import io.fabric8.kubernetes.api.model.PodSpec;
import io.fabric8.kubernetes.api.model.Volume;
import io.fabric8.kubernetes.api.model.VolumeMount;
import io.fabric8.kubernetes.api.model.apps.DaemonSet;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The node agent's Kubernetes manifest, read into fabric8's Kubernetes object model: every field is one the model
 * knows (none landed in {@code additionalProperties}, where a misspelt or misplaced key would go, and which the API
 * server would drop or refuse), and it has what flatpull needs on a node. No kubelet runs here; docs/kubernetes.md
 * says what was and was not run.
 */
class DaemonSetManifestTest {
  private static final Path DIR = Path.of(System.getProperty("flatpull.root", "..")).toAbsolutePath().normalize()
      .resolve("docs/examples");
  private static final Map<String, Class<? extends HasMetadata>> KINDS =
      Map.of("Namespace", Namespace.class, "ConfigMap", ConfigMap.class, "DaemonSet", DaemonSet.class);
  private static final List<HasMetadata> objects = new ArrayList<>();
  private static DaemonSet daemonSet;
  private static ConfigMap configMap;

  @BeforeAll
  static void read() throws Exception {
    // Strict: a key of the wrong type or shape fails here rather than being coerced.
    ObjectMapper yaml = new ObjectMapper(new YAMLFactory())
        .enable(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES);
    try (var docs = yaml.readerFor(JsonNode.class).readValues(DIR.resolve("kubernetes/flatpull.yaml").toFile())) {
      while (docs.hasNext()) {
        JsonNode doc = (JsonNode) docs.next();
        String kind = doc.path("kind").asText();
        Class<? extends HasMetadata> type = KINDS.get(kind);
        assertNotNull(type, "an object of an unexpected kind: " + kind);
        HasMetadata o = yaml.treeToValue(doc, type);
        objects.add(o);
        if (o instanceof DaemonSet d) {
          daemonSet = d;
        } else if (o instanceof ConfigMap c) {
          configMap = c;
        }
      }
    }
    assertEquals(3, objects.size());
    assertNotNull(daemonSet);
    assertNotNull(configMap);
  }

  @Test
  void everyField_isOneTheModelKnows() throws Exception {
    for (HasMetadata o : objects) {
      List<String> unknown = new ArrayList<>();
      walk(o, o.getKind(), unknown, java.util.Collections.newSetFromMap(new IdentityHashMap<>()));
      assertEquals(List.of(), unknown, o.getKind() + " has fields the model does not know");
    }
  }

  /** Collects the path of every non-empty {@code additionalProperties} below {@code o}. */
  private static void walk(Object o, String path, List<String> unknown, Set<Object> seen) throws Exception {
    if (o == null || !o.getClass().getName().startsWith("io.fabric8.") || !seen.add(o)) {
      return;
    }
    for (Method m : o.getClass().getMethods()) {
      if (m.getParameterCount() != 0 || Modifier.isStatic(m.getModifiers()) || !m.getName().startsWith("get")
          || m.getDeclaringClass() == Object.class) {
        continue;
      }
      Object v = m.invoke(o);
      String child = path + "." + m.getName().substring(3);
      if (m.getName().equals("getAdditionalProperties")) {
        if (v instanceof Map<?, ?> extra && !extra.isEmpty()) {
          unknown.add(path + ": " + extra.keySet());
        }
      } else if (v instanceof List<?> list) {
        for (int i = 0; i < list.size(); i++) {
          walk(list.get(i), child + "[" + i + "]", unknown, seen);
        }
      } else if (v instanceof Map<?, ?> map) {
        for (Map.Entry<?, ?> e : map.entrySet()) {
          walk(e.getValue(), child + "[" + e.getKey() + "]", unknown, seen);
        }
      } else {
        walk(v, child, unknown, seen);
      }
    }
  }

  private static Container container() {
    List<Container> containers = daemonSet.getSpec().getTemplate().getSpec().getContainers();
    assertEquals(1, containers.size());
    return containers.get(0);
  }

  private static VolumeMount mountAt(String path) {
    return container().getVolumeMounts().stream().filter(m -> m.getMountPath().equals(path)).findFirst()
        .orElseThrow(() -> new AssertionError("nothing is mounted at " + path));
  }

  private static Volume volume(String name) {
    return daemonSet.getSpec().getTemplate().getSpec().getVolumes().stream().filter(v -> v.getName().equals(name))
        .findFirst().orElseThrow(() -> new AssertionError("no volume " + name));
  }

  private static FlatpullConfig flatpullConfig() throws Exception {
    return FlatpullConfig.parse("config.toml", configMap.getData().get("config.toml"));
  }

  @Test
  void theContainer_isPrivilegedWithDevFuse() {
    assertEquals(Boolean.TRUE, container().getSecurityContext().getPrivileged());
    VolumeMount fuse = mountAt("/dev/fuse");
    assertEquals("/dev/fuse", volume(fuse.getName()).getHostPath().getPath());
    assertEquals("CharDevice", volume(fuse.getName()).getHostPath().getType());
  }

  @Test
  void flatpullsRootAndSockets_areHostPathsAtTheSamePaths_theRootBidirectional() throws Exception {
    FlatpullConfig config = flatpullConfig();
    VolumeMount root = mountAt(config.root().toString());
    assertEquals(config.root().toString(), volume(root.getName()).getHostPath().getPath(),
        "containerd mounts the snapshots at the paths flatpull names: the node's");
    assertEquals("Bidirectional", root.getMountPropagation(),
        "the mounts flatpull makes under its root must reach containerd's mount namespace");
    for (Path socket : List.of(config.snapshotter().socket(), config.snapshotter().fuseManagerSocket())) {
      VolumeMount run = mountAt(socket.getParent().toString());
      assertEquals(socket.getParent().toString(), volume(run.getName()).getHostPath().getPath(),
          "containerd dials " + socket + " on the node");
    }
  }

  @Test
  void theConfiguration_isFlatpullsAndMatchesContainerds() throws Exception {
    FlatpullConfig config = flatpullConfig();
    assertEquals("/etc/flatpull/config.toml", container().getCommand().get(container().getCommand().size() - 1));
    assertEquals(configMap.getMetadata().getName(), volume(mountAt("/etc/flatpull").getName()).getConfigMap().getName());
    ContainerdConfig containerd = ContainerdConfig.load(DIR.resolve("containerd-config.toml"));
    assertEquals(config.snapshotter().socket().toString(), containerd.proxySnapshotters().get("flatpull"));
    assertEquals("flatpull", containerd.criSnapshotter().orElseThrow());
    assertFalse(containerd.criDisableSnapshotAnnotations(), "CRI must pass the image labels");
    assertTrue(mountAt("/etc/containerd").getReadOnly(), "doctor reads containerd's configuration");
    assertTrue(config.registry().hostsDirectory().orElseThrow().startsWith(Path.of("/etc/containerd")),
        "hosts.toml (mirrors, pull-through caches) shared with containerd");
  }

  @Test
  void theDaemonRuns_withTheUnitsJavaOptions() throws Exception {
    String opts = container().getEnv().stream().filter(e -> e.getName().equals("FLATPULL_JAVA_OPTS")).findFirst()
        .orElseThrow().getValue();
    assertEquals(DocumentedSetUp.daemonJavaOptions(), List.of(opts.trim().split("\\s+")),
        "the DaemonSet's FLATPULL_JAVA_OPTS are the systemd unit's");
    assertFalse(DocumentedSetUp.daemonJavaOptions().isEmpty(), "the unit's options are read");
  }

  @Test
  void nothingRestartsThePodUnderRunningContainers() throws Exception {
    PodSpec pod = daemonSet.getSpec().getTemplate().getSpec();
    assertEquals("OnDelete", daemonSet.getSpec().getUpdateStrategy().getType(),
        "a rollout would end the FUSE manager under running containers");
    assertNull(container().getLivenessProbe(), "a failed liveness probe restarts the container");
    // An OOM kill ends the FUSE manager under running containers: the limit is the documented unit's, which the
    // cold-start benchmark runs both processes under, well above their measured peaks (docs/benchmarks.md, "Memory").
    assertEquals(DocumentedSetUp.memoryLimitBytes().orElseThrow(),
        container().getResources().getLimits().get("memory").getNumericalAmount().longValueExact(),
        "the DaemonSet's memory limit is the systemd unit's MemoryMax");
    assertTrue(DocumentedSetUp.memoryLimitBytes().orElseThrow() >= 2L << 30, "a limit well above the measured peaks");
    assertEquals(Boolean.TRUE, pod.getHostPID(), "doctor checks containerd's mount namespace");
    assertEquals("system-node-critical", pod.getPriorityClassName());
  }
}
