// Command cluster runs the quick start's requirement on a society spread
// over three nodes of one cluster (package agentsociety/cluster), in one
// program, on a NATS server with JetStream that the program embeds.
//
//	go run ./examples/cluster
//
// One node leads: it runs the society on the cluster's bucket. Every node
// makes the model calls of the agents placed on it, with its own model (here
// the offline demo model of internal/demo, the same on every node). The
// requirement is submitted on node n1, the answer is awaited on node n2,
// and the program prints which node made each agent's model calls.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/internal/demo"
	"agentsociety/llm"
	"agentsociety/store/natsstore/natstest"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// calls records which node made which agent's model calls.
type calls struct {
	mu     sync.Mutex
	byNode map[string]map[string]int // agent -> node -> calls
}

// model returns the demo model of node id, recording its calls.
func (c *calls) model(id string) llm.Model {
	m := demo.Model()
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		c.mu.Lock()
		if c.byNode[req.Agent] == nil {
			c.byNode[req.Agent] = map[string]int{}
		}
		c.byNode[req.Agent][id]++
		c.mu.Unlock()
		return m.Generate(ctx, req)
	})
}

// run plays the quick start on three nodes, printing to out, and logs the
// nodes' warnings and errors to logw. Each node is closed before its
// connection: a leader that closes writes the society's last records to the
// bucket through it.
func run(ctx context.Context, out, logw io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "agentsociety-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ns, err := natstest.Start(dir)
	if err != nil {
		return err
	}
	defer natstest.Stop(ns)

	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rec := &calls{byNode: map[string]map[string]int{}}
	var nodes []*cluster.Node
	for _, id := range []string{"n1", "n2", "n3"} {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			return err
		}
		n, err := cluster.Join(ctx, nc, cluster.Options{
			Cluster: "quickstart", NodeID: id, LeaseTTL: 2 * time.Second,
			Config: as.Config{Model: rec.model(id), Logger: logger},
		})
		if err != nil {
			nc.Close()
			return err
		}
		nodes = append(nodes, n)
		// The node first, then its connection: defers run last in, first
		// out, and the node needs its connection to close.
		defer nc.Close()
		defer func() { err = errors.Join(err, n.Close()) }()
	}

	task, err := nodes[0].SubmitRequirement(ctx, demo.Requirement)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "submitted on %s: %s\n", nodes[0].ID(), demo.Requirement)
	reply, err := nodes[1].WaitForUserMessage(ctx, func(m as.Message) bool {
		return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "answer on %s, from %s: %s\n", nodes[1].ID(), reply.From, reply.Text())
	fmt.Fprintf(out, "leader: %s\n\n", nodes[2].Leader())

	agents, err := nodes[2].Agents(ctx)
	if err != nil {
		return err
	}
	roles, err := nodes[2].Roles(ctx)
	if err != nil {
		return err
	}
	roleName := map[string]string{}
	for _, r := range roles {
		roleName[r.ID] = r.Name
	}
	names := map[string]string{as.RootID: "root"}
	for _, a := range agents {
		names[a.ID] = roleName[a.RoleID]
	}
	fmt.Fprintln(out, "model calls, by agent and node:")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	ids := make([]string, 0, len(rec.byNode))
	for id := range rec.byNode {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		var parts []string
		for node, n := range rec.byNode[id] {
			parts = append(parts, fmt.Sprintf("%s×%d", node, n))
		}
		slices.Sort(parts)
		fmt.Fprintf(out, "  %-8s %-10s %s\n", id, names[id], strings.Join(parts, " "))
	}
	return nil
}
