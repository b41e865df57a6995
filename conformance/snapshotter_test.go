// Package conformance runs containerd's own snapshotter conformance suite (snapshots/testsuite, the one containerd
// runs on every built-in snapshotter) against `flatpull serve`, through containerd's proxy snapshotter client: the
// same gRPC calls containerd makes to a proxy plugin. Each test gets a daemon of its own whose root is the suite's
// directory.
//
// bin/conformance builds and runs it offline from Debian's Go sources; it never skips: without root, Java or the
// built jar the test fails.
package conformance

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/containerd/snapshots/proxy"
	"github.com/containerd/containerd/snapshots/testsuite"
	"google.golang.org/grpc"
)

// How long a daemon may take to answer on its socket. Issue budget: the whole suite in 2 minutes.
const startTimeout = 60 * time.Second

func TestSnapshotterSuite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("containerd's snapshotter suite mounts what the snapshotter returns: run it as root")
	}
	jar := os.Getenv("FLATPULL_JAR")
	if jar == "" {
		t.Fatal("FLATPULL_JAR must name the built flatpull jar (bin/conformance sets it)")
	}
	if _, err := os.Stat(jar); err != nil {
		t.Fatalf("FLATPULL_JAR: %v", err)
	}
	testsuite.SnapshotterSuite(t, "flatpull", func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
		return startFlatpull(ctx, jar, root)
	})
}

// startFlatpull starts `flatpull serve` on root (the suite's directory; configuration, sockets and logs go beside
// it) and returns a proxy snapshotter connected to it, and a cleanup that stops the daemon and its FUSE manager.
func startFlatpull(ctx context.Context, jar, root string) (snapshots.Snapshotter, func() error, error) {
	dir := filepath.Dir(root)
	config := filepath.Join(dir, "flatpull.toml")
	socket := filepath.Join(dir, "flatpull.sock")
	toml := fmt.Sprintf(`root = %q
[snapshotter]
socket = %q
fuse_manager_socket = %q
# The warm-ups prepare a cold start's code path; the suite makes no remote snapshot.
warm_up = false
# The FUSE manager the daemon starts serves nothing here: it starts with the JVM's quickest settings.
fuse_manager_java_options = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
`, root, socket, filepath.Join(dir, "fuse-manager.sock"))
	if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
		return nil, nil, err
	}
	java := os.Getenv("JAVA")
	if java == "" {
		java = "java"
	}
	logFile, err := os.Create(filepath.Join(dir, "flatpull.log"))
	if err != nil {
		return nil, nil, err
	}
	// A daemon lives for one test of a few calls: the JVM's client compiler alone and one collector thread cost the
	// least CPU on two cores, where the suite starts two daemons and their managers at a time.
	cmd := exec.Command(java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-jar", jar, "serve", "--config", config)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// The suite clears the umask for its own checks; the daemon runs with a node's usual one.
	old := syscall.Umask(0o022)
	err = cmd.Start()
	syscall.Umask(old)
	if err != nil {
		logFile.Close()
		return nil, nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		defer logFile.Close()
		var failure error
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				failure = fmt.Errorf("flatpull serve did not stop on SIGTERM within 20 s")
			}
		}
		// The daemon leaves its FUSE manager running on purpose (it outlives restarts); here nothing is mounted.
		_ = exec.Command("pkill", "-TERM", "-f", "fuse-manager --config "+config).Run()
		for i := 0; i < 100 && exec.Command("pgrep", "-f", "fuse-manager --config "+config).Run() == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		_ = exec.Command("pkill", "-KILL", "-f", "fuse-manager --config "+config).Run()
		return failure
	}

	started := time.Now()
	conn, err := dial(ctx, socket, exited, started)
	if err != nil {
		_ = stop()
		return nil, nil, fmt.Errorf("%v\n--- flatpull serve's log:\n%s", err, readLog(dir))
	}
	fmt.Printf("flatpull serve answered in %d ms\n", time.Since(started).Milliseconds())
	cleanup := func() error {
		closeErr := conn.Close()
		if err := stop(); err != nil {
			return err
		}
		return closeErr
	}
	return proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(conn), "flatpull"), cleanup, nil
}

// dial waits until the daemon accepts a connection on its socket (it creates the socket once it serves).
func dial(ctx context.Context, socket string, exited chan error, started time.Time) (*grpc.ClientConn, error) {
	for time.Since(started) < startTimeout {
		select {
		case err := <-exited:
			exited <- err
			return nil, fmt.Errorf("flatpull serve exited before answering: %v", err)
		default:
		}
		if _, err := os.Stat(socket); err == nil {
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			conn, err := grpc.DialContext(dctx, socket, grpc.WithInsecure(), grpc.WithBlock(),
				grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "unix", addr)
				}))
			cancel()
			if err == nil {
				return conn, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("flatpull serve did not answer on %s within %s", socket, startTimeout)
}

func readLog(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "flatpull.log"))
	if err != nil {
		return err.Error()
	}
	return string(bytes.TrimSpace(b))
}
