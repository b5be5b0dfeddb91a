package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/store/natsstore/natstest"
)

// spawner is the code-driven society of the property test. root, on each
// message from user, creates its role "lead" (reused after the first),
// spawns the task's lead (reused after the first) and, for a new lead,
// tells it to spawn; a lead, told so, creates its role "helper" and spawns
// a helper. Both report to user with a text saying who reports and on
// what, whether the spawn was refused or not.
func spawner() as.Config {
	brief := &as.TaskBrief{Objective: "o", Constraints: []string{"c"}, Inputs: "i", Outputs: "o", CompletionCriteria: "c"}
	spawn := func(ctx context.Context, self *as.Actor, role string) (as.Agent, bool, error) {
		r, _, err := self.CreateRole(ctx, as.RoleSpec{Name: role, Prompt: role})
		if err != nil {
			return as.Agent{}, false, err
		}
		return self.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: brief})
	}
	return as.Config{
		MaxAgents: 4,
		Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			child, reused, err := spawn(ctx, self, "lead")
			if err == nil && !reused {
				_, err = self.SendText(ctx, child.ID, "spawn")
			}
			_, serr := self.SendText(ctx, as.UserID, fmt.Sprintf("done %s %v", m.ID, err))
			return serr
		}),
		DefaultBehavior: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			if m.Text() != "spawn" {
				return nil
			}
			_, _, err := spawn(ctx, self, "helper")
			_, serr := self.SendText(ctx, as.UserID, fmt.Sprintf("lead %s %v", self.ID(), err))
			return serr
		}),
	}
}

// Requirements and messages to root submitted at once on different nodes
// leave an organisation that keeps the hard constraints: root never has two
// children for one task, no agent creates two roles of one name, the agent
// cap holds, and every registry holds exactly the agent's parent and
// children.
func TestPropertyHardConstraints_AcrossNodes(t *testing.T) {
	url := natstest.Server(t)
	rapid.Check(t, func(rt *rapid.T) {
		ctx := hangGuard(t)
		name := newClusterName()
		var nodes []*cluster.Node
		for i := range 3 {
			nodes = append(nodes, join(rt, url, name, fmt.Sprintf("n%d", i), cluster.Options{Config: spawner()}))
		}
		var mu sync.Mutex
		var got []string
		nodes[0].OnUserMessage(func(m as.Message) {
			mu.Lock()
			got = append(got, m.Text())
			mu.Unlock()
		})

		submits := rapid.SliceOfN(rapid.IntRange(0, 2), 1, 4).Draw(rt, "submits") // the node of each
		tasks := make([]string, len(submits))
		var wg sync.WaitGroup
		for i, on := range submits {
			wg.Go(func() {
				task, err := nodes[on].SubmitRequirement(ctx, "work")
				if err != nil {
					rt.Errorf("SubmitRequirement on n%d: %v", on, err)
				}
				tasks[i] = task
			})
		}
		wg.Wait()
		if rt.Failed() {
			return
		}
		type send struct{ node, task int }
		sends := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) send {
			return send{rapid.IntRange(0, 2).Draw(t, "node"), rapid.IntRange(0, len(tasks)-1).Draw(t, "task")}
		}), 0, 4).Draw(rt, "sends")
		for _, s := range sends {
			wg.Go(func() {
				if _, err := nodes[s.node].SendTextToAgent(ctx, as.RootID, "again", tasks[s.task]); err != nil {
					rt.Errorf("SendTextToAgent on n%d: %v", s.node, err)
				}
			})
		}
		wg.Wait()

		// Wait until root has answered every message and every lead has
		// reported.
		want := len(submits) + len(sends)
		var agents []as.Agent
		waitFor(rt, ctx, "root's answers and the leads' reports", func() bool {
			// The messages first, then the agents: every spawn that
			// preceded a report shows.
			done, leads := 0, 0
			mu.Lock()
			for _, text := range got {
				if strings.HasPrefix(text, "done ") {
					done++
				} else {
					leads++
				}
			}
			mu.Unlock()
			var err error
			if agents, err = nodes[1].Agents(ctx); err != nil {
				rt.Fatal(err)
			}
			return done == want && leads == count(agents, func(a as.Agent) bool { return a.ParentID == as.RootID })
		})
		roles, err := nodes[2].Roles(ctx)
		if err != nil {
			rt.Fatal(err)
		}

		if len(agents) > 4 {
			rt.Fatalf("%d agents, over the cap of 4", len(agents))
		}
		perTask := map[string]int{}
		children := map[string][]string{}
		for _, a := range agents {
			if a.ParentID == as.RootID {
				if perTask[a.TaskID]++; perTask[a.TaskID] > 1 {
					rt.Fatalf("root has two children for task %s", a.TaskID)
				}
			}
			children[a.ParentID] = append(children[a.ParentID], a.ID)
		}
		if len(agents) < 4 && len(perTask) != len(tasks) {
			rt.Fatalf("root has children for %d tasks, want one for each of the %d tasks: the cap was not reached", len(perTask), len(tasks))
		}
		seen := map[string]bool{}
		for _, r := range roles {
			key := r.CreatedBy + "/" + r.Name
			if seen[key] {
				rt.Fatalf("%s created two roles named %q", r.CreatedBy, r.Name)
			}
			seen[key] = true
		}
		for _, a := range agents {
			list, err := nodes[0].Contacts(ctx, a.ID)
			if err != nil {
				rt.Fatal(err)
			}
			var ids []string
			for _, c := range list {
				ids = append(ids, c.ID)
			}
			want := append([]string{a.ParentID}, children[a.ID]...)
			if !slices.Equal(ids, want) {
				rt.Fatalf("the registry of %s holds %v, want its parent and children %v", a.ID, ids, want)
			}
		}
	})
}

func count[T any](list []T, f func(T) bool) int {
	n := 0
	for _, v := range list {
		if f(v) {
			n++
		}
	}
	return n
}
