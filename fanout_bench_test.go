package agentsociety_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

const (
	foChildren = 100
	foDelay    = 20 * time.Millisecond
	// foParentSeq is the number of the parent's model calls that come one
	// after the other before any child can start: one that spawns every
	// child, one that sends each a message. The parent's last call, which
	// ends its turn, runs beside the children's.
	foParentSeq = 2
)

// foResult is one fan-out run.
type foResult struct {
	wall     time.Duration // from the parent's message to the last model call's end
	peak     int           // llmtest's MaxInFlight
	calls    int           // model calls in all
	perChild map[string]int
	critical time.Duration // the least wall time the cap allows
}

// foCritical is the critical path of a fan-out under a cap of maxCalls
// model calls in flight: the parent's sequential calls, then the children's
// calls and the parent's last one in as few waves as the cap allows. With a
// cap of at least foChildren+1 it is foParentSeq×delay + one child's call.
func foCritical(maxCalls int) time.Duration {
	waves := (foChildren + 1 + maxCalls - 1) / maxCalls
	return time.Duration(foParentSeq+waves) * foDelay
}

// foRun has a model-driven parent spawn foChildren model-driven children in
// one assistant message and message each of them in the next; each child
// answers with one model call. The model takes foDelay per call.
func foRun(tb testing.TB, maxCalls int, startTimer, stopTimer func()) foResult {
	ctx := context.Background()
	done := make(chan struct{}, foChildren+1)
	var roleID string // set before the parent's first call
	var spawns []llm.ToolCall
	model := llmtest.New(
		llmtest.Rule{Name: "spawn all", SystemContains: "FANOUT-LEAD", LastContains: "fan out", Reply: func(*llm.Request) (*llm.Response, error) {
			if spawns == nil {
				brief, _ := json.Marshal(validBrief())
				args := json.RawMessage(`{"roleId":"` + roleID + `","taskBrief":` + string(brief) + `}`)
				for range foChildren {
					spawns = append(spawns, llm.ToolCall{Name: "spawn_agent", Arguments: args})
				}
			}
			return llmtest.Calls(spawns...), nil
		}},
		llmtest.Rule{Name: "message all", SystemContains: "FANOUT-LEAD", AfterTool: "spawn_agent", Reply: func(req *llm.Request) (*llm.Response, error) {
			var sends []llm.ToolCall
			for _, m := range req.Messages {
				if m.Role != llm.RoleTool {
					continue
				}
				var r struct {
					AgentID string `json:"agentId"`
				}
				if json.Unmarshal([]byte(m.Content), &r) != nil || r.AgentID == "" {
					return nil, fmt.Errorf("spawn_agent failed: %s", m.Content)
				}
				sends = append(sends, llm.ToolCall{Name: "send_message", Arguments: json.RawMessage(`{"to":"` + r.AgentID + `","payload":{"text":"do your part"}}`)})
			}
			return llmtest.Calls(sends...), nil
		}},
		llmtest.Rule{Name: "parent ends", SystemContains: "FANOUT-LEAD", AfterTool: "send_message", Reply: func(*llm.Request) (*llm.Response, error) {
			done <- struct{}{}
			return say(""), nil
		}},
		llmtest.Rule{Name: "child", SystemContains: "FANOUT-WORKER", Reply: func(*llm.Request) (*llm.Response, error) {
			done <- struct{}{}
			return say(""), nil
		}},
	)
	model.Delay = foDelay
	s, err := as.New(ctx, as.Config{Model: model, Logger: quiet, MaxModelCalls: maxCalls, Root: as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil })})
	if err != nil {
		tb.Fatal(err)
	}
	lead := mtSpawn(tb, s, "fan", "lead", "FANOUT-LEAD: split the work", nil)
	leadActor, err := s.Actor(lead.ID)
	if err != nil {
		tb.Fatal(err)
	}
	role, _, err := leadActor.CreateRole(ctx, as.RoleSpec{Name: "worker", Prompt: "FANOUT-WORKER: do one part"})
	if err != nil {
		tb.Fatal(err)
	}
	roleID = role.ID
	root, _ := s.Actor(as.RootID)
	root = root.WithTask("fan")

	startTimer()
	start := time.Now()
	if _, err := root.SendText(ctx, lead.ID, "fan out"); err != nil {
		tb.Fatal(err)
	}
	for i := range foChildren + 1 {
		select {
		case <-done:
		case <-time.After(mtTimeout):
			tb.Fatalf("only %d of %d agents finished their model call", i, foChildren+1)
		}
	}
	wall := time.Since(start)
	stopTimer()

	cctx, cancel := context.WithTimeout(ctx, mtTimeout)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		tb.Fatal(err)
	}
	res := foResult{wall: wall, peak: model.MaxInFlight(), calls: model.Calls(), perChild: map[string]int{}, critical: foCritical(maxCalls)}
	for _, req := range model.Requests() {
		if strings.Contains(req.System, "FANOUT-WORKER") {
			res.perChild[req.Agent]++
		}
	}
	if n := len(s.Agents()); n != foChildren+1 {
		tb.Fatalf("%d agents, want the parent and %d children", n, foChildren)
	}
	if len(res.perChild) != foChildren || res.calls != foParentSeq+1+foChildren {
		tb.Fatalf("%d children called the model, %d calls in all; want %d and %d", len(res.perChild), res.calls, foChildren, foParentSeq+1+foChildren)
	}
	for id, n := range res.perChild {
		if n != 1 {
			tb.Fatalf("child %s made %d model calls, want exactly 1", id, n)
		}
	}
	if res.peak > maxCalls {
		tb.Fatalf("%d model calls in flight with MaxModelCalls = %d", res.peak, maxCalls)
	}
	return res
}

// BenchmarkFanOut measures a parent fanning work out to 100 children on a
// model that takes 20 ms a call. x-critical-path is the wall time over the
// critical path (goal ≤ 1.05); peak-in-flight is the most model calls that
// ran at once. With MaxModelCalls = 10 the peak must be exactly 10, and the
// critical path counts the waves the cap forces.
func BenchmarkFanOut(b *testing.B) {
	for _, maxCalls := range []int{128, 10} {
		b.Run(fmt.Sprintf("MaxModelCalls=%d", maxCalls), func(b *testing.B) {
			var wall time.Duration
			peak := 0
			b.StopTimer()
			for range b.N {
				res := foRun(b, maxCalls, b.StartTimer, b.StopTimer)
				wall += res.wall
				peak = max(peak, res.peak)
				if maxCalls <= foChildren && res.peak != maxCalls {
					b.Fatalf("peak-in-flight = %d with MaxModelCalls = %d, want exactly %d", res.peak, maxCalls, maxCalls)
				}
			}
			b.ReportMetric(float64(wall)/float64(b.N)/float64(foCritical(maxCalls)), "x-critical-path")
			b.ReportMetric(float64(peak), "peak-in-flight")
		})
	}
}

// TestFanOut runs the benchmark's scenario once per cap, so that what the
// benchmark measures is known to work: every child makes exactly one model
// call, and the cap holds and is reached.
func TestFanOut(t *testing.T) {
	for _, c := range []struct{ maxCalls, wantPeak int }{{128, 0}, {10, 10}} {
		res := foRun(t, c.maxCalls, func() {}, func() {})
		t.Logf("MaxModelCalls=%d: wall %v, critical path %v (x%.2f), peak in flight %d", c.maxCalls, res.wall, res.critical, float64(res.wall)/float64(res.critical), res.peak)
		if c.wantPeak != 0 && res.peak != c.wantPeak {
			t.Errorf("peak in flight %d with MaxModelCalls = %d, want %d", res.peak, c.maxCalls, c.wantPeak)
		}
		if res.wall < res.critical {
			t.Errorf("wall time %v is under the critical path %v: the model's delay was not served", res.wall, res.critical)
		}
	}
}
