// Package natstest runs a NATS server with JetStream inside a test
// process, so that tests of the NATS backend need no service installed or
// started.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server starts a NATS server with JetStream on a temporary directory of
// t, listening on a random port of 127.0.0.1, and returns its client URL.
// The server shuts down when t ends.
func Server(t testing.TB) string {
	t.Helper()
	ns, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Stop(ns) })
	return ns.ClientURL()
}

// Start starts a NATS server with JetStream storing in dir, listening on
// a random port of 127.0.0.1, for a program that embeds one (an example,
// a test's child process). Stop it with [Stop].
func Start(dir string) (*server.Server, error) { return start(dir, true) }

// StartWithout starts a NATS server as Start does, but without JetStream,
// for tests of what a client does when it finds none.
func StartWithout(dir string) (*server.Server, error) { return start(dir, false) }

func start(dir string, jetStream bool) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: jetStream, StoreDir: dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, err
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) { // a hang guard
		Stop(ns)
		return nil, errors.New("natstest: the NATS server did not start")
	}
	return ns, nil
}

// Cluster starts n NATS servers with JetStream, routed to each other as
// one cluster, each on temporary directories of t and random ports of
// 127.0.0.1, and returns their client URLs once the cluster has elected
// the leader of its JetStream meta group, so that a stream of several
// replicas can be made at once. The servers shut down when t ends.
//
// The cluster ports are picked before the servers listen on them, so
// another process may take one meanwhile, and the cluster then never
// forms: a cluster that makes no stream of n replicas within
// clusterWait is shut down and started again on other ports, up to
// clusterTries times.
func Cluster(t testing.TB, n int) []string {
	t.Helper()
	var err error
	for range clusterTries {
		var servers []*server.Server
		var urls []string
		servers, urls, err = startCluster(t, n)
		if err == nil {
			err = ready(urls[0], n)
		}
		if err == nil {
			t.Cleanup(func() {
				for _, ns := range servers {
					Stop(ns)
				}
			})
			return urls
		}
		for _, ns := range servers {
			Stop(ns)
		}
	}
	t.Fatal(err)
	return nil
}

// How long Cluster waits for a cluster to form, and how many times it
// starts one.
const (
	clusterWait  = 30 * time.Second
	clusterTries = 3
)

// startCluster starts the n servers of a cluster, on cluster ports picked
// for them. The caller stops the servers it returns, error or not.
func startCluster(t testing.TB, n int) ([]*server.Server, []string, error) {
	routes := make([]string, n)
	ports := make([]int, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
	}
	var urls []string
	var servers []*server.Server
	for i := range n {
		ns, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("s%d", i), Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
			NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			return servers, nil, err
		}
		ns.Start()
		servers = append(servers, ns)
		urls = append(urls, ns.ClientURL())
	}
	return servers, urls, nil
}

// ready waits until the cluster at url makes a stream of n replicas, the
// sign that its JetStream meta group has a leader and knows every server,
// for up to clusterWait.
func ready(url string, n int) error {
	deadline := time.Now().Add(clusterWait)
	for {
		err := makeStream(url, n)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natstest: the cluster made no stream of %d replicas within %v: %w", n, clusterWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// makeStream makes and removes a stream of n replicas at url.
func makeStream(url string, n int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "natstest_ready", Replicas: n, Storage: jetstream.MemoryStorage}); err != nil {
		return err
	}
	return js.DeleteStream(ctx, "natstest_ready")
}

// Stop shuts ns down and waits for it.
func Stop(ns *server.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
}
