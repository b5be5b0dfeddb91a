package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/store/natsstore/natstest"
)

// modelTurn is how long the benchmark's model takes for one call.
const modelTurn = 20 * time.Millisecond

// localModel is a model that serves one call at a time, taking modelTurn
// each, as a local model on one accelerator would: a node's model calls
// queue for it, so spreading them over nodes shows. Its answer has the
// agent report to user.
func localModel() llm.Model {
	var mu sync.Mutex
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(modelTurn):
		}
		return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": "worker " + req.Agent}, "end_turn": true}), nil
	})
}

// benchConfig is the benchmark's society: root spawns a model-driven
// worker for each requirement, whose one model call reports to user.
func benchConfig() as.Config {
	brief := &as.TaskBrief{Objective: "o", Constraints: []string{"c"}, Inputs: "i", Outputs: "o", CompletionCriteria: "c"}
	return as.Config{
		Logger:        quiet,
		MaxAgents:     1 << 20,
		MaxModelCalls: 64,
		Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			r, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "worker", Prompt: "work"})
			if err != nil {
				return err
			}
			_, _, err = self.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: brief})
			return err
		}),
	}
}

// submitter is what the benchmark submits to and hears from: a society or
// a node.
type submitter interface {
	SubmitRequirement(ctx context.Context, text string) (string, error)
	OnUserMessage(f func(as.Message)) func()
}

type society struct{ *as.Society }

func (s society) SubmitRequirement(ctx context.Context, text string) (string, error) {
	return s.Society.SubmitRequirement(ctx, text)
}

type node struct{ *cluster.Node }

func (n node) SubmitRequirement(ctx context.Context, text string) (string, error) {
	return n.Node.SubmitRequirement(ctx, text)
}

// runTasks submits b.N requirements, 32 at a time, on the submitters in
// turn, and waits until every worker has reported to the first.
func runTasks(b *testing.B, ctx context.Context, on []submitter) {
	var reported atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	unregister := on[0].OnUserMessage(func(m as.Message) {
		if strings.HasPrefix(m.Text(), "worker ") && reported.Add(1) == n {
			close(all)
		}
	})
	defer unregister()
	cpu := processCPU(b)
	b.ResetTimer()
	sem := make(chan struct{}, 32)
	for i := range b.N {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			if _, err := on[i%len(on)].SubmitRequirement(ctx, "work"); err != nil {
				b.Error(err)
			}
		}()
	}
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("%d of %d workers reported: %v", reported.Load(), b.N, ctx.Err())
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkTasks measures requirements that each spawn a worker whose one
// model call takes modelTurn on a model that serves one call at a time
// per process or node: in one process (the baseline), on a cluster of one
// node, and on a cluster of three nodes (in this process, on an embedded
// NATS server with memory storage). An op is one requirement, its spawn,
// its model call and its report to user; cpu-ns/op is the whole process's
// CPU, server and nodes included.
func BenchmarkTasks(b *testing.B) {
	b.Run("OneProcess", func(b *testing.B) {
		ctx := hangGuard(b)
		cfg := benchConfig()
		cfg.Model = localModel()
		s, err := as.New(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(context.Background())
		runTasks(b, ctx, []submitter{society{s}})
	})
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("Nodes=%d", nodes), func(b *testing.B) {
			ctx := hangGuard(b)
			url := natstest.Server(b)
			name := newClusterName()
			var on []submitter
			for i := range nodes {
				cfg := benchConfig()
				cfg.Model = localModel()
				on = append(on, node{join(b, url, name, fmt.Sprintf("n%d", i), cluster.Options{Config: cfg, LeaseTTL: 2 * time.Second})})
			}
			runTasks(b, ctx, on)
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// msgPairs is how many pairs of agents exchange messages at once in
// BenchmarkMessages, and how many publishers its baseline runs.
const msgPairs = 16

// msgText is the text of BenchmarkMessages' messages.
var msgText = strings.Repeat("x", 100)

// BenchmarkMessages measures messages between code-driven agents on a
// cluster of two nodes (in this process, on an embedded NATS server with
// memory storage): msgPairs pairs of agents that answer each other's
// messages. Its baseline, JetStream, runs on the same server in the same
// run: msgPairs publishers each publish a message of the same size and
// wait for its acknowledgement before the next, into a stream of the same
// storage, and one consumer acknowledges each. An op is one message
// handled, or one message consumed; cpu-ns/op is the whole process's CPU,
// server included.
func BenchmarkMessages(b *testing.B) {
	b.Run("JetStream", func(b *testing.B) {
		ctx := hangGuard(b)
		nc := connect(b, natstest.Server(b))
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		strm, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "bench", Subjects: []string{"bench.>"}, Storage: jetstream.MemoryStorage})
		if err != nil {
			b.Fatal(err)
		}
		cons, err := strm.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			b.Fatal(err)
		}
		var consumed atomic.Int64
		all := make(chan struct{})
		cc, err := cons.Consume(func(m jetstream.Msg) {
			m.Ack()
			if consumed.Add(1) == int64(b.N) {
				close(all)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Stop()
		cpu := processCPU(b)
		b.ResetTimer()
		var next atomic.Int64
		var wg sync.WaitGroup
		for p := range msgPairs {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if _, err := js.Publish(ctx, fmt.Sprintf("bench.%d", p), []byte(msgText)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		select {
		case <-all:
		case <-ctx.Done():
			b.Fatalf("%d of %d messages consumed", consumed.Load(), b.N)
		}
		b.StopTimer()
		b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})

	b.Run("Nodes=2", func(b *testing.B) {
		ctx := hangGuard(b)
		var handled atomic.Int64
		all := make(chan struct{})
		n := int64(b.N)
		// Each of a pair answers the other's message, until b.N messages
		// were handled in all; the first of a pair starts when its parent
		// sends it the other's id.
		answer := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			to := m.From
			if m.From == self.Agent().ParentID {
				to = m.Text()
			} else {
				switch h := handled.Add(1); {
				case h == n:
					close(all)
					return nil
				case h > n:
					return nil
				}
			}
			_, err := self.SendText(ctx, to, msgText)
			return err
		})
		brief := as.TaskBrief{Objective: "o", Constraints: []string{"c"}, Inputs: "i", Outputs: "o", CompletionCriteria: "c"}
		// Root gives each requirement a lead, which spawns a pair.
		lead := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			r, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "pinger"})
			if err != nil {
				return err
			}
			second, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: &brief, Behavior: answer})
			if err != nil {
				return err
			}
			withSecond := brief
			withSecond.Collaborators = []as.Collaborator{{AgentID: second.ID}}
			first, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: &withSecond, Behavior: answer})
			if err != nil {
				return err
			}
			_, err = self.SendText(ctx, first.ID, second.ID)
			return err
		})
		cfg := as.Config{Logger: quiet, Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			r, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead"})
			if err != nil {
				return err
			}
			l, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: &brief, Behavior: lead})
			if err != nil {
				return err
			}
			_, err = self.SendText(ctx, l.ID, m.Text())
			return err
		})}
		url := natstest.Server(b)
		name := newClusterName()
		first := join(b, url, name, "n0", cluster.Options{Config: cfg, LeaseTTL: 2 * time.Second})
		join(b, url, name, "n1", cluster.Options{Config: cfg, LeaseTTL: 2 * time.Second})
		cpu := processCPU(b)
		b.ResetTimer()
		for range msgPairs {
			if _, err := first.SubmitRequirement(ctx, "ping"); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-all:
		case <-ctx.Done():
			b.Fatalf("%d of %d messages handled", handled.Load(), b.N)
		}
		b.StopTimer()
		b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}
