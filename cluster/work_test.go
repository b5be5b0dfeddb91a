package cluster_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/store/natsstore/natstest"
)

// threeNodes joins n0, waits for it to lead, then joins n1 and n2, each
// with opts(id); root's calls go to n1 or n2, never to n0 (its rank for
// root is the lowest of the three: see cluster.Rank).
func threeNodes(t *testing.T, ctx context.Context, opts func(id string) cluster.Options) map[string]*cluster.Node {
	t.Helper()
	url := natstest.Server(t)
	name := newClusterName()
	nodes := map[string]*cluster.Node{"n0": join(t, url, name, "n0", opts("n0"))}
	waitFor(t, ctx, "n0 to lead", func() bool { return nodes["n0"].Leader() == "n0" })
	for _, id := range []string{"n1", "n2"} {
		nodes[id] = join(t, url, name, id, opts(id))
	}
	return nodes
}

// A node that leaves (Close) while it runs a host-tool call for an agent
// has the call made again on the agent's next node, as when it dies: the
// model does not get the leaving node's cancellation as the tool's result.
func TestHostTool_MovesWhenItsNodeCloses(t *testing.T) {
	ctx := hangGuard(t)
	var first atomic.Value // the node the call reached first
	started := make(chan string, 1)
	opts := func(id string) cluster.Options {
		model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
			last := req.Messages[len(req.Messages)-1]
			if last.Role != llm.RoleTool {
				return script.Call("slow", nil), nil
			}
			return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": last.Content}, "end_turn": true}), nil
		})
		return cluster.Options{
			Config: as.Config{Model: model},
			Tools: []cluster.Tool{{Name: "slow", Description: "slow", Handler: func(ctx context.Context, c cluster.ToolCall) (any, error) {
				if first.CompareAndSwap(nil, id) {
					started <- id
					<-ctx.Done() // until its node leaves
					return nil, ctx.Err()
				}
				return "done on " + id, nil
			}}},
		}
	}
	nodes := threeNodes(t, ctx, opts)
	if _, err := nodes["n0"].SubmitRequirement(ctx, "go"); err != nil {
		t.Fatal(err)
	}
	on := recvCtx(t, ctx, started, "the tool call")
	nodes[on].Close()
	m, err := nodes["n0"].WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Text(), "done on ") || strings.Contains(m.Text(), "done on "+on) {
		t.Fatalf("the tool's result, its node %s having closed during the call: %q, want the call made again on another node", on, m.Text())
	}
}

// When the leader's model call is cancelled (here: the leader closes), the
// call running on the agent's node is cancelled too, as it would be in one
// process: it does not run on beside the call the next leader makes again.
func TestModelCall_CancelReachesTheNode(t *testing.T) {
	ctx := hangGuard(t)
	var cancelled atomic.Int32
	first := make(chan string, 3)
	opts := func(id string) cluster.Options {
		model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
			first <- id
			<-ctx.Done()
			cancelled.Add(1)
			return nil, ctx.Err()
		})
		return cluster.Options{Config: as.Config{Model: model, ModelCallTimeout: -1}}
	}
	nodes := threeNodes(t, ctx, opts)
	if _, err := nodes["n0"].SubmitRequirement(ctx, "go"); err != nil {
		t.Fatal(err)
	}
	on := recvCtx(t, ctx, first, "root's model call")
	nodes["n0"].Close() // the leader's society closes, cancelling its turn
	waitFor(t, ctx, "the model call on "+on+" to be cancelled", func() bool { return cancelled.Load() > 0 })
}

// A model that panics on a call, as a model may on a request it does not
// expect, does not bring its node's process down: the society contains a
// panic in a turn, and a node must not crash where one process would not.
// Here the request is one any process on the NATS server can publish: a
// model call without messages, to a model that reads the last one.
func TestWork_ModelPanicDoesNotCrashTheNode(t *testing.T) {
	const envChild = "AGENTSOCIETY_CLUSTER_TEST_PANIC"
	if url := os.Getenv(envChild); url != "" {
		ctx := hangGuard(t)
		model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
			last := req.Messages[len(req.Messages)-1] // panics on a request without messages
			return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: last.Content}}, nil
		})
		n := join(t, url, "panic", "victim", cluster.Options{Config: as.Config{Model: model}})
		m, err := connect(t, url).RequestWithContext(ctx, "agentsociety.panic.work.victim", []byte(`{"Model":{}}`))
		if err != nil {
			t.Fatalf("the call to the node: %v", err)
		}
		if !strings.Contains(string(m.Data), "panicked") {
			t.Fatalf("the node answered %s, want the panic as an error", m.Data)
		}
		n.Close()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWork_ModelPanicDoesNotCrashTheNode$")
	cmd.Env = append(os.Environ(), envChild+"="+natstest.Server(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		first, _, _ := strings.Cut(string(out), "goroutine ")
		t.Fatalf("the node's process: %v\n%s", err, first)
	}
}

// A host tool whose result is larger than the server's max_payload (1 MB)
// ends the agent's turn, with an error for its result, instead of leaving
// the leader waiting for an answer that was never sent.
func TestHostTool_ResultLargerThanMaxPayload(t *testing.T) {
	ctx := hangGuard(t)
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role != llm.RoleTool {
			return script.Call("big", nil), nil
		}
		return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": last.Content}, "end_turn": true}), nil
	})
	n := join(t, natstest.Server(t), newClusterName(), "n0", cluster.Options{
		Config: as.Config{Model: model},
		Tools: []cluster.Tool{{Name: "big", Description: "a large result", Handler: func(ctx context.Context, c cluster.ToolCall) (any, error) {
			return strings.Repeat("y", 2<<20), nil
		}}},
	})
	if _, err := n.SubmitRequirement(ctx, "call it"); err != nil {
		t.Fatal(err)
	}
	m, err := n.WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatalf("root's turn after a 2 MB tool result: %v", err)
	}
	if !strings.Contains(m.Text(), "does not fit") {
		t.Fatalf("the tool's result as the model saw it: %.200q, want the error that it does not fit", m.Text())
	}
}

// A model call whose request is larger than the server's max_payload (here
// two tool results of 600 kB each in the agent's history) fails at once,
// as a request the model cannot take, instead of being sent again every
// sixth of the lease time, as if the connection were down, until its
// context ends: with no ModelCallTimeout, never.
func TestModelCall_RequestLargerThanMaxPayload(t *testing.T) {
	ctx := hangGuard(t)
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		tools := 0
		for _, m := range req.Messages {
			if m.Role == llm.RoleTool {
				tools++
			}
		}
		if tools < 2 {
			return script.Call("half", nil), nil
		}
		return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": "two results"}, "end_turn": true}), nil
	})
	n := join(t, natstest.Server(t), newClusterName(), "n0", cluster.Options{
		Config: as.Config{Model: model, ModelCallTimeout: -1, ModelRetries: -1, HistoryBudget: 8 << 20}, // a long-context model
		Tools: []cluster.Tool{{Name: "half", Description: "600 kB", Handler: func(ctx context.Context, c cluster.ToolCall) (any, error) {
			return strings.Repeat("y", 600<<10), nil
		}}},
	})
	if _, err := n.SubmitRequirement(ctx, "call it twice"); err != nil {
		t.Fatal(err)
	}
	m, err := n.WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatalf("root's turn, whose third model request is over 1 MB: %v", err)
	}
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || p.Status != string(as.StatusError) {
		t.Fatalf("user got %s, want root's failure reported", m.Payload)
	}
}

// recvCtx receives from ch, failing t if ctx ends first.
func recvCtx[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
	}
	panic("unreachable")
}

// A host tool that fails on its own while its node is leaving (Close) has
// its error answered, as any other failure: the call ran, and the leader
// does not make it again on another node. Only a call the leaving node cut
// short (its context cancelled) is made again.
func TestHostTool_OwnFailureWhileItsNodeClosesIsNotMadeAgain(t *testing.T) {
	ctx := hangGuard(t)
	var runs atomic.Int32
	started := make(chan string, 1)
	opts := func(id string) cluster.Options {
		model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
			last := req.Messages[len(req.Messages)-1]
			if last.Role != llm.RoleTool {
				return script.Call("slow", nil), nil
			}
			return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": last.Content}, "end_turn": true}), nil
		})
		return cluster.Options{
			Config: as.Config{Model: model},
			Tools: []cluster.Tool{{Name: "slow", Description: "slow", Handler: func(ctx context.Context, c cluster.ToolCall) (any, error) {
				if runs.Add(1) == 1 {
					started <- id
					<-ctx.Done() // its node is leaving
					return nil, errors.New("the disk is full")
				}
				return "done on " + id, nil
			}}},
		}
	}
	nodes := threeNodes(t, ctx, opts)
	if _, err := nodes["n0"].SubmitRequirement(ctx, "go"); err != nil {
		t.Fatal(err)
	}
	on := recvCtx(t, ctx, started, "the tool call")
	nodes[on].Close()
	m, err := nodes["n0"].WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Text(), "the disk is full") || runs.Load() != 1 {
		t.Fatalf("the tool's result, the tool having failed on %s as its node closed: %q after %d runs, want its failure after one run", on, m.Text(), runs.Load())
	}
}
