package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/llm"
	"agentsociety/store/natsstore/natstest"
)

// A node joins a cluster on a NATS connection (a server with JetStream;
// here one embedded in the process) and takes the user calls of a
// society as one would: the leader runs the society, and the model calls
// of each agent run on the node that owns it. Close each node before its
// connection: a leader that closes writes the society's last records
// through it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "cluster-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ns, err := natstest.Start(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer natstest.Stop(ns)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()

	// root answers each requirement at once, on whichever node owns it.
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{
			ID: "call-1", Name: "send_message",
			Arguments: json.RawMessage(`{"to": "user", "payload": {"text": "done"}, "end_turn": true}`),
		}}}}, nil
	})
	node, err := cluster.Join(ctx, nc, cluster.Options{
		Cluster: "example", NodeID: "n1",
		Config: as.Config{Model: model, Logger: slog.New(slog.DiscardHandler)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if err := node.Close(); err != nil {
			fmt.Println(err)
		}
	}()

	task, err := node.SubmitRequirement(ctx, "a calculator", cluster.WithBudget(as.Budget{ModelCalls: 10}))
	if err != nil {
		fmt.Println(err)
		return
	}
	reply, err := node.WaitForUserMessage(ctx, func(m as.Message) bool { return m.TaskID == task })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("leader %s; %s says %q\n", node.Leader(), reply.From, reply.Text())
	// Output:
	// leader n1; root says "done"
}
