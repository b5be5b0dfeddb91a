package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/store/natsstore/natstest"
)

// The environment of a node process started by TestLossOfNode: the test
// binary, run again, is that node until it is killed or its stdin closes.
const (
	envNode    = "AGENTSOCIETY_CLUSTER_TEST_NODE"
	envURL     = "AGENTSOCIETY_CLUSTER_TEST_URL"
	envCluster = "AGENTSOCIETY_CLUSTER_TEST_CLUSTER"
)

func TestMain(m *testing.M) {
	if id := os.Getenv(envNode); id != "" {
		os.Exit(runNode(id))
	}
	os.Exit(m.Run())
}

// runNode is a node process: it joins the cluster and stays until its
// stdin closes (the test is over) or it is killed.
func runNode(id string) int {
	nc, err := nats.Connect(os.Getenv(envURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	o := lossOptions(os.Getenv(envCluster), id)
	if os.Getenv("DBG") != "" {
		o.Config.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	n, err := cluster.Join(context.Background(), nc, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	io.Copy(io.Discard, os.Stdin)
	n.Close()
	nc.Close()
	return 0
}

// lossOptions is the configuration of every node of the loss test. root
// answers "msg k" with "ack k", and on "spawn" spawns a worker for the
// task; a worker, driven by a model that takes a few milliseconds, reports
// "worker <id>" to user.
func lossOptions(name, id string) cluster.Options {
	brief := &as.TaskBrief{Objective: "o", Constraints: []string{"c"}, Inputs: "i", Outputs: "o", CompletionCriteria: "c"}
	return cluster.Options{
		Cluster: name, NodeID: id, LeaseTTL: time.Second, Storage: jetstream.MemoryStorage,
		Config: as.Config{
			Logger: quiet,
			Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
				if k, ok := strings.CutPrefix(m.Text(), "msg "); ok {
					_, err := self.SendText(ctx, as.UserID, "ack "+k)
					return err
				}
				r, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "worker", Prompt: "work"})
				if err != nil {
					return err
				}
				_, _, err = self.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: brief})
				return err
			}),
			Model: llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
				return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": "worker " + req.Agent}, "end_turn": true}), nil
			}),
		},
	}
}

// lossRounds is how many times TestLossOfNode kills a node.
const lossRounds = 20

// Three node processes run a cluster; the test's own node sends numbered
// messages to root and submits requirements that spawn a worker each, and
// kills one of the processes with SIGKILL at a random point, the leader
// about half the time. Every accepted message is handled, in the order
// accepted, spawns are not duplicated, and the run completes.
func TestLossOfNode(t *testing.T) {
	url := natstest.Server(t)
	// Rounds run side by side (as many as -test.parallel allows), each on a
	// cluster of its own: most of a round is waiting for a lease to expire.
	t.Run("rounds", func(t *testing.T) {
		for round := range lossRounds {
			t.Run(fmt.Sprint(round), func(t *testing.T) {
				t.Parallel()
				lossRound(t, url, round)
			})
		}
	})
}

func lossRound(t *testing.T, url string, round int) {
	ctx := hangGuard(t)

	name := newClusterName()
	procs := map[string]*exec.Cmd{}
	for i := range 3 {
		id := fmt.Sprintf("p%d", i)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envNode+"="+id, envURL+"="+url, envCluster+"="+name)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[id] = cmd
		t.Cleanup(func() {
			stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	// The test's node joins once a process leads, so that the processes
	// lead first.
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	waitFor(t, ctx, "a process to lead", func() bool {
		kv, err := js.KeyValue(ctx, name+"_leases")
		if err != nil {
			return false
		}
		e, err := kv.Get(ctx, "leader")
		if err != nil {
			return false
		}
		leader = string(e.Value())
		return true
	})
	me := join(t, url, name, "test", lossOptions(name, "test"))

	var mu sync.Mutex
	var acks []int               // the k of each "ack k", in arrival order
	workers := map[string]bool{} // the tasks whose worker reported
	me.OnUserMessage(func(m as.Message) {
		mu.Lock()
		defer mu.Unlock()
		if k, ok := strings.CutPrefix(m.Text(), "ack "); ok {
			n, _ := strconv.Atoi(k)
			acks = append(acks, n)
		} else if strings.HasPrefix(m.Text(), "worker ") {
			workers[m.TaskID] = true
		}
	})

	const n = 40
	killAt := rand.IntN(n)
	victim := fmt.Sprintf("p%d", rand.IntN(3))
	if rand.IntN(2) == 0 {
		victim = leader
	}
	task, err := me.SubmitRequirement(ctx, "msg -1")
	for err != nil {
		task, err = me.SubmitRequirement(ctx, "msg -1")
	}
	var accepted []int
	var spawned []string
	for k := range n {
		if k == killAt {
			procs[victim].Process.Signal(syscall.SIGKILL)
		}
		// A call to a leader that dies before it answers has an unknown
		// outcome: it counts as not accepted, and so does one made while
		// no node leads.
		call := func(f func(ctx context.Context) error) bool {
			cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			return f(cctx) == nil
		}
		if k%5 == 0 {
			var t string
			if call(func(ctx context.Context) (err error) { t, err = me.SubmitRequirement(ctx, "spawn"); return err }) {
				spawned = append(spawned, t)
			}
		}
		if call(func(ctx context.Context) error {
			_, err := me.SendTextToAgent(ctx, as.RootID, fmt.Sprintf("msg %d", k), task)
			return err
		}) {
			accepted = append(accepted, k)
		}
	}
	var missing []string
	waitFor(t, ctx, "every accepted message's ack and every spawn's worker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		missing = missing[:0]
		for _, k := range accepted {
			if !slices.Contains(acks, k) {
				missing = append(missing, fmt.Sprint(k))
			}
		}
		for _, task := range spawned {
			if !workers[task] {
				missing = append(missing, task)
			}
		}
		if d, _ := ctx.Deadline(); len(missing) > 0 && time.Until(d) < 50*time.Millisecond {
			t.Logf("round %d (killed %s, leader %s, at %d; now led by %s): missing %v; acks %v", round, victim, leader, killAt, me.Leader(), missing, acks)
		}
		return len(missing) == 0
	})
	mu.Lock()
	first := []int{}
	for _, k := range acks {
		if k >= 0 && !slices.Contains(first, k) {
			first = append(first, k)
		}
	}
	mu.Unlock()
	var inOrder []int
	for _, k := range first {
		if slices.Contains(accepted, k) {
			inOrder = append(inOrder, k)
		}
	}
	if !slices.Equal(inOrder, accepted) {
		t.Fatalf("round %d (killed %s, leader %s, at %d): root handled the accepted messages in the order %v, want %v", round, victim, leader, killAt, inOrder, accepted)
	}
	agents, err := me.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perTask := map[string]int{}
	for _, a := range agents {
		perTask[a.TaskID]++
	}
	for task, c := range perTask {
		if c > 1 {
			t.Fatalf("round %d: %d workers for task %s", round, c, task)
		}
	}
	for _, task := range spawned {
		if perTask[task] != 1 {
			t.Fatalf("round %d: task %s, accepted, has %d workers", round, task, perTask[task])
		}
	}
	t.Logf("round %d: killed %s (leader %s) before message %d; %d of %d messages and %d spawns accepted; now led by %s",
		round, victim, leader, killAt, len(accepted), n, len(spawned), me.Leader())
}
