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
				on = append(on, join(b, url, name, fmt.Sprintf("n%d", i), cluster.Options{Config: cfg, LeaseTTL: 2 * time.Second}))
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
