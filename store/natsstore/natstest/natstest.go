// Package natstest runs a NATS server with JetStream inside a test
// process, so that tests of the NATS backend need no service installed or
// started.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server starts a NATS server with JetStream on a temporary directory of
// t, listening on a random port of 127.0.0.1, and returns its client URL.
// The server shuts down when t ends.
func Server(t testing.TB) string {
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
		t.Fatal("natstest: the NATS server did not start")
	}
	return ns.ClientURL()
}
