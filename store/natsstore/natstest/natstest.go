// Package natstest runs a NATS server with JetStream inside a test
// process, so that tests of the NATS backend need no service installed or
// started.
package natstest

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// Stop shuts ns down and waits for it.
func Stop(ns *server.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
}
