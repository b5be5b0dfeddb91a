package natsstore_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/natsstore"
	"agentsociety/store/storetest"

	"github.com/nats-io/nats-server/v2/server"
)

// runServer starts a NATS server with JetStream on a temporary directory,
// listening on a random port of 127.0.0.1, and returns its URL. It shuts
// down when the test ends.
func runServer(t testing.TB) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) { // a hang guard
		t.Fatal("the NATS server did not start")
	}
	return ns.ClientURL()
}

var buckets atomic.Int64

// open opens a store on a bucket of its own on url, closed when the test
// ends.
func open(t testing.TB, url string, opts natsstore.Options) *natsstore.Store {
	t.Helper()
	opts.URL = url
	if opts.Bucket == "" {
		opts.Bucket = fmt.Sprintf("b%d", buckets.Add(1))
	}
	s, err := natsstore.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	url := runServer(t)
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, url, natsstore.Options{}) })
}

// New with a URL where no server listens fails at once, within its
// context, rather than wait for a server.
func TestNew_Unreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a hang guard
	defer cancel()
	s, err := natsstore.New(ctx, natsstore.Options{URL: "nats://" + addr})
	if err == nil {
		s.Close()
		t.Fatal("New with no server: got no error")
	}
	if ctx.Err() != nil {
		t.Fatalf("New with no server waited until the guard's deadline: %v", err)
	}
}
