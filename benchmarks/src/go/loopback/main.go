// go-fuse's loopback file system (its example/loopback, which Debian's package does not ship), with the timeouts
// flatpull's mounts use: the peer against which bin/benchmark-mount-latency measures flatpull's FUSE engines.
// Usage: loopback MOUNTPOINT ORIGINAL
package main

import (
	"flag"
	"log"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
)

func main() {
	flag.Parse()
	if flag.NArg() != 2 {
		log.Fatal("usage: loopback MOUNTPOINT ORIGINAL")
	}
	root, err := fs.NewLoopbackRoot(flag.Arg(1))
	if err != nil {
		log.Fatal(err)
	}
	hour := time.Hour
	opts := &fs.Options{AttrTimeout: &hour, EntryTimeout: &hour, NegativeTimeout: &hour}
	opts.MountOptions.AllowOther = true
	opts.MountOptions.Name = "loopback"
	server, err := fs.Mount(flag.Arg(0), root, opts)
	if err != nil {
		log.Fatal(err)
	}
	server.Wait()
}
