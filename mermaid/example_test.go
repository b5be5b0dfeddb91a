package mermaid_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	as "agentsociety"
	"agentsociety/mermaid"
)

// Example draws a small organisation. OrgOf reads one from a society.
func Example() {
	org := mermaid.Org{
		Roles: []as.Role{
			{ID: "role-1", Name: "lead", CreatedBy: as.RootID},
			{ID: "role-2", Name: "developer", CreatedBy: "agent-1"},
		},
		Agents: []as.Agent{
			{ID: "agent-1", RoleID: "role-1", ParentID: as.RootID},
			{ID: "agent-2", RoleID: "role-2", ParentID: "agent-1"},
		},
	}
	if err := mermaid.WriteFlowchart(os.Stdout, org); err != nil {
		fmt.Println(err)
	}
	// Output:
	// flowchart TD
	//   classDef role fill:#f5f0ff,stroke:#7b61c4
	//   classDef terminated stroke-dasharray:4 3,color:#888
	//   root(("root"))
	//   r1{{"role: lead"}}:::role
	//   r2{{"role: developer"}}:::role
	//   a1["agent-1<br>lead"]
	//   a2["agent-2<br>developer"]
	//   root --> a1
	//   a1 --> a2
	//   root -. creates .-> r1
	//   a1 -. creates .-> r2
}

// WriteSequence draws a task's messages from the society's event log: here
// a requirement that root hands to a lead, which answers the user.
func ExampleWriteSequence() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lead := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		_, err := self.SendText(ctx, as.UserID, "done: the page is ready")
		return err
	})
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead"})
		if err != nil {
			return err
		}
		child, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Behavior: lead, Brief: &as.TaskBrief{
			Objective: m.Text(), Constraints: []string{}, Inputs: "the requirement",
			Outputs: "a page", CompletionCriteria: "it works",
		}})
		if err != nil {
			return err
		}
		_, err = self.SendText(ctx, child.ID, "please build: "+m.Text())
		return err
	})
	s, err := as.New(ctx, as.Config{Root: root, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	task, err := s.SubmitRequirement(ctx, "a calculator")
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := s.WaitForUserMessage(ctx, func(m as.Message) bool { return m.TaskID == task }); err != nil {
		fmt.Println(err)
		return
	}
	if err := mermaid.WriteSequence(os.Stdout, s.Events(ctx, 1), task); err != nil {
		fmt.Println(err)
	}
	// Output:
	// sequenceDiagram
	//   participant p1 as user
	//   participant p2 as root
	//   participant p3 as agent-1 (lead)
	//   p1->>p2: general: a calculator
	//   p2->>p3: general: please build: a calculator
	//   p3->>p1: general: done: the page is ready
}
