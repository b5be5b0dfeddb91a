package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/store/natsstore/natstest"
)

// An artifact larger than the server's max_payload (1 MB), which the
// society stores, read through a node: the leader's answer does not fit
// one NATS message, and the call fails with the leader's error rather than
// waiting out its context and reporting an unknown outcome.
func TestGetArtifact_LargerThanMaxPayload(t *testing.T) {
	ctx := hangGuard(t)
	data := bytes.Repeat([]byte("x"), 2<<20)
	cfg := as.Config{Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		a, err := self.PutArtifact(ctx, as.ArtifactSpec{Name: "big", Data: data})
		if err != nil {
			return err
		}
		_, err = self.SendText(ctx, as.UserID, a.Ref())
		return err
	})}
	n := join(t, natstest.Server(t), newClusterName(), "n0", cluster.Options{Config: cfg})
	if _, err := n.SubmitRequirement(ctx, "make it"); err != nil {
		t.Fatal(err)
	}
	m, err := n.WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, got, err := n.GetArtifact(ctx, m.Text())
	switch {
	case err == nil && len(got) != len(data):
		t.Fatalf("GetArtifact: %d bytes, want %d", len(got), len(data))
	case errors.Is(err, cluster.ErrUnknownOutcome) || err != nil && !strings.Contains(err.Error(), "does not fit"):
		t.Fatalf("GetArtifact of a 2 MB artifact: %v, want the leader's error that its answer does not fit", err)
	}
}

// A user call taken by a leader that then dies (its process paused, then
// killed, as a leader cut off mid-call) fails with ErrUnknownOutcome once
// another node has led for a lease time, instead of waiting for an answer
// that cannot come for as long as its context lasts: with
// context.Background, for ever.
func TestUserCall_LeaderDiesWithTheCall(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envNode+"=p0", envURL+"="+url, envCluster+"="+name)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "p0 to lead", func() bool {
		kv, err := js.KeyValue(ctx, name+"_leases")
		if err != nil {
			return false
		}
		e, err := kv.Get(ctx, "leader")
		return err == nil && string(e.Value()) == "p0"
	})
	me := join(t, url, name, "test", lossOptions(name, "test"))
	if _, err := me.Agents(ctx); err != nil { // p0 serves calls
		t.Fatal(err)
	}
	// The call is delivered to p0, paused, which never reads it: seen
	// here, on the calls' subject, it is on its way to p0 too.
	sent, err := nc.SubscribeSync("agentsociety." + name + ".call")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	errc := make(chan error, 1)
	go func() {
		_, err := me.SubmitRequirement(context.Background(), "msg 1")
		errc <- err
	}()
	if _, err := sent.NextMsgWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	if err := recvCtx(t, ctx, errc, "the call taken by p0, dead, to return"); !errors.Is(err, cluster.ErrUnknownOutcome) {
		t.Fatalf("the call: %v, want ErrUnknownOutcome", err)
	}
}

// goroutinesBy returns the stacks of the goroutines that a function of
// package cluster whose name starts with prefix started.
func goroutinesBy(prefix string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by agentsociety/cluster."+prefix) {
			out = append(out, g)
		}
	}
	return out
}

// A user call waiting on the leader's answer runs in its caller's
// goroutine and starts none of the node's: nothing of it can outlive
// Close, which ends the call with as.ErrClosed. Once Close has returned,
// no goroutine the node started is left.
func TestUserCall_NoGoroutineOutlivesClose(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A leader that is this test: it takes the call and never answers.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name + "_leases", TTL: time.Minute, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "leader", []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	calls, err := nc.QueueSubscribeSync("agentsociety."+name+".call", "leader")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n := join(t, url, name, "n0", cluster.Options{Config: echo(), LeaseTTL: time.Minute})
	waitFor(t, ctx, "n0 to see the ghost lead", func() bool { return n.Leader() == "ghost" })
	errc := make(chan error, 1)
	go func() {
		_, err := n.Agents(context.Background())
		errc <- err
	}()
	if _, err := calls.NextMsgWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	if g := goroutinesBy("(*Node).request"); len(g) > 0 {
		t.Errorf("a user call in flight runs %d goroutines of its own, which Close does not wait for:\n%s", len(g), strings.Join(g, "\n\n"))
	}
	n.Close()
	if err := recvCtx(t, ctx, errc, "the call to end"); !errors.Is(err, as.ErrClosed) {
		t.Fatalf("the call in flight as its node closed: %v, want ErrClosed", err)
	}
	if g := goroutinesBy(""); len(g) > 0 {
		t.Fatalf("%d goroutines started by the node outlive Close:\n%s", len(g), strings.Join(g, "\n\n"))
	}
}

// A user call that reaches the leader as it steps down (here: it closes)
// is answered as by a cluster with no leader, so that its node sends it
// again to the next leader: the one the leader was about to take up, and
// one still waiting in the leader's connection. Neither is left without an
// answer, which the caller would wait out as an unknown outcome.
func TestUserCall_ReachesALeaderSteppingDown(t *testing.T) {
	ctx := hangGuard(t)
	ns, err := natstest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natstest.Stop(ns) })
	url := ns.ClientURL()
	name := newClusterName()
	callSubj := "agentsociety." + name + ".call"
	// The first call the leader receives waits, before the leader takes it
	// up, until the leader has stopped taking calls: until the server no
	// longer sends it any.
	var first atomic.Bool
	arrived := make(chan struct{}, 1)
	cluster.SetCallHook(func() {
		if !first.CompareAndSwap(false, true) {
			return
		}
		arrived <- struct{}{}
		for ns.GlobalAccount().SubscriptionInterest(callSubj) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	})
	t.Cleanup(func() { cluster.SetCallHook(nil) })

	a := join(t, url, name, "a", cluster.Options{Config: echo()})
	waitFor(t, ctx, "a to lead", func() bool { return a.Leader() == "a" })
	b := join(t, url, name, "b", cluster.Options{Config: echo()})
	errc := make(chan error, 1)
	go func() {
		_, err := b.SubmitRequirement(ctx, "hello")
		errc <- err
	}()
	recvCtx(t, ctx, arrived, "the leader to receive the call")

	// A second call, sent directly, reaches a's connection behind the
	// first: a answers a call of the test's sent after it on its work
	// subject, so it has read it.
	nc := connect(t, url)
	replies := make(chan *nats.Msg, 2)
	inbox := nc.NewInbox()
	if _, err := nc.ChanSubscribe(inbox, replies); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(callSubj, inbox, []byte(`{"Op":"agents"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.RequestWithContext(ctx, "agentsociety."+name+".work.a", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}

	a.Close()
	if err := recvCtx(t, ctx, errc, "the first call's answer"); err != nil {
		t.Fatalf("a call that reached the leader as it stepped down: %v, want it made by the next leader", err)
	}
	m := recvCtx(t, ctx, replies, "the second call's answer")
	if len(m.Data) != 0 || m.Header.Get("Status") != "503" {
		t.Fatalf("a call waiting for a leader stepping down was answered %q %v, want no responders (503)", m.Data, m.Header)
	}
}

// A call the leader has taken up when its lease ends fails with
// ErrUnknownOutcome, not with the leader's cancellation, which the caller
// would read as its own.
func TestUserCall_LeaderStepsDownDuringTheCall(t *testing.T) {
	ctx := hangGuard(t)
	ns, err := natstest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natstest.Stop(ns) })
	url := ns.ClientURL()
	name := newClusterName()
	var first atomic.Bool
	arrived := make(chan struct{}, 1)
	cluster.SetServeHook(func(lead context.Context) {
		if !first.CompareAndSwap(false, true) {
			return
		}
		arrived <- struct{}{}
		select {
		case <-lead.Done():
		case <-ctx.Done():
		}
	})
	t.Cleanup(func() { cluster.SetServeHook(nil) })

	a := join(t, url, name, "a", cluster.Options{Config: echo()})
	waitFor(t, ctx, "a to lead", func() bool { return a.Leader() == "a" })
	b := join(t, url, name, "b", cluster.Options{Config: echo()})
	errc := make(chan error, 1)
	go func() {
		_, err := b.SubmitRequirement(ctx, "hello")
		errc <- err
	}()
	recvCtx(t, ctx, arrived, "the leader to take the call up")
	go a.Close()
	err = recvCtx(t, ctx, errc, "the call's answer")
	if !errors.Is(err, cluster.ErrUnknownOutcome) {
		t.Fatalf("a call the leader was making as it stepped down: %v, want one wrapping cluster.ErrUnknownOutcome", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatalf("a call the leader was making as it stepped down: %v, which the caller reads as its own context's cancellation", err)
	}
}
