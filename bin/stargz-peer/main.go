// Minimal containerd-stargz-grpc built offline from Debian's golang-github-containerd-stargz-snapshotter-dev
// (v0.12.0). Debian ships only ctr-remote: the upstream daemon's `service` package needs the k8s CRI API
// (CRI keychain), which Debian does not package. This main wires the same pieces as
// service.NewStargzSnapshotterService (fs.NewFilesystem + snapshot.NewSnapshotter, default-label
// sources, retrying HTTP client, plain HTTP for localhost) minus CRI/kubeconfig keychains and mirrors,
// and serves it on a unix socket as a containerd proxy snapshotter. Build: bin/build-stargz OUT_BINARY
package main

import (
	"context"
	"flag"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/contrib/snapshotservice"
	"github.com/containerd/containerd/log"
	"github.com/containerd/containerd/reference"
	"github.com/containerd/containerd/remotes/docker"
	stargzfs "github.com/containerd/stargz-snapshotter/fs"
	"github.com/containerd/stargz-snapshotter/fs/config"
	"github.com/containerd/stargz-snapshotter/fs/layer"
	"github.com/containerd/stargz-snapshotter/fs/source"
	snbase "github.com/containerd/stargz-snapshotter/snapshot"
	rhttp "github.com/hashicorp/go-retryablehttp"
	"github.com/pelletier/go-toml"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
)

func hosts(ref reference.Spec) ([]docker.RegistryHost, error) {
	client := rhttp.NewClient()
	client.Logger = nil
	tr := client.StandardClient()
	tr.Timeout = 30 * time.Second
	h := docker.RegistryHost{
		Client:       tr,
		Host:         ref.Hostname(),
		Scheme:       "https",
		Path:         "/v2",
		Capabilities: docker.HostCapabilityPull | docker.HostCapabilityResolve,
		Authorizer:   docker.NewDockerAuthorizer(docker.WithAuthClient(tr)),
	}
	if local, _ := docker.MatchLocalhost(h.Host); local || os.Getenv("STARGZ_PLAIN_HTTP") == "1" {
		h.Scheme = "http"
	}
	return []docker.RegistryHost{h}, nil
}

func main() {
	root := flag.String("root", "/var/lib/containerd-stargz-grpc", "state root")
	addr := flag.String("address", "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock", "gRPC socket")
	cfgPath := flag.String("config", "", "TOML with fs options (upstream config.toml top-level keys, e.g. noprefetch, disable_verification)")
	level := flag.String("log-level", "info", "log level")
	flag.Parse()
	lvl, err := logrus.ParseLevel(*level)
	if err != nil {
		lvl = logrus.InfoLevel
	}
	logrus.SetLevel(lvl)
	ctx := log.WithLogger(context.Background(), log.L)

	var cfg config.Config
	if *cfgPath != "" {
		tree, err := toml.LoadFile(*cfgPath)
		if err != nil {
			log.G(ctx).WithError(err).Fatal("load config")
		}
		if err := tree.Unmarshal(&cfg); err != nil {
			log.G(ctx).WithError(err).Fatal("parse config")
		}
	}
	if err := os.MkdirAll(*root, 0700); err != nil {
		log.G(ctx).WithError(err).Fatal("mkdir root")
	}
	fs, err := stargzfs.NewFilesystem(filepath.Join(*root, "stargz"), cfg,
		stargzfs.WithGetSources(source.FromDefaultLabels(hosts)),
		stargzfs.WithOverlayOpaqueType(layer.OverlayOpaqueTrusted))
	if err != nil {
		log.G(ctx).WithError(err).Fatal("new filesystem")
	}
	rs, err := snbase.NewSnapshotter(ctx, filepath.Join(*root, "snapshotter"), fs, snbase.AsynchronousRemove)
	if err != nil {
		log.G(ctx).WithError(err).Fatal("new snapshotter")
	}
	rpc := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(rpc, snapshotservice.FromSnapshotter(rs))
	if err := os.MkdirAll(filepath.Dir(*addr), 0700); err != nil {
		log.G(ctx).WithError(err).Fatal("mkdir socket dir")
	}
	os.Remove(*addr)
	l, err := net.Listen("unix", *addr)
	if err != nil {
		log.G(ctx).WithError(err).Fatal("listen")
	}
	errCh := make(chan error, 1)
	go func() { errCh <- rpc.Serve(l) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		log.G(ctx).Infof("got %v, shutting down", s)
	case err := <-errCh:
		log.G(ctx).WithError(err).Error("serve")
	}
	rpc.Stop()
	if err := rs.Close(); err != nil {
		log.G(ctx).WithError(err).Error("close")
	}
}
