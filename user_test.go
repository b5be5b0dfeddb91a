package agentsociety_test

import (
	"context"
	"strings"
	"testing"

	as "agentsociety"
)

func TestSubmitRequirementRoundTrip(t *testing.T) {
	ctx := context.Background()
	worker := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		_, err := self.SendText(ctx, as.UserID, "done: "+m.Text())
		return err
	})
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "lead the task"})
		if err != nil {
			return err
		}
		child, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: worker})
		if err != nil {
			return err
		}
		_, err = self.SendText(ctx, child.ID, m.Text())
		return err
	})
	s := newSociety(t, as.Config{Root: root})
	task, err := s.SubmitRequirement(ctx, "calc")
	if err != nil {
		t.Fatal(err)
	}
	m := userMessage(t, s)
	if m.Text() != "done: calc" || m.TaskID != task {
		t.Fatalf("got %q on task %q, want %q on %q", m.Text(), m.TaskID, "done: calc", task)
	}
	agents := s.Agents()
	if len(agents) != 1 || agents[0].ParentID != as.RootID || agents[0].TaskID != task {
		t.Fatalf("agents = %+v", agents)
	}
	if !s.IsKnown(as.RootID, agents[0].ID) || !s.IsKnown(agents[0].ID, as.RootID) {
		t.Fatal("root and its child must know each other")
	}
	if !s.IsKnown(as.UserID, agents[0].ID) {
		t.Fatal("user must know the agent that wrote to it first")
	}
}

func TestUserConsoleShowsNoReplyHint(t *testing.T) {
	var console strings.Builder
	s := newSociety(t, as.Config{UserConsole: &console})
	root, _ := s.Actor(as.RootID)
	if _, err := root.SendText(context.Background(), as.UserID, "hello"); err != nil {
		t.Fatal(err)
	}
	userMessage(t, s)
	if got, want := console.String(), "【来自 root（root）的消息】\nhello\n\n"; got != want {
		t.Fatalf("console = %q, want %q", got, want)
	}
}

func TestSendTextToRootStartsATask(t *testing.T) {
	got := make(chan as.Message, 1)
	s := newSociety(t, as.Config{Root: as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		return nil
	})})
	m, err := s.SendTextToAgent(context.Background(), as.RootID, "new work", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.TaskID, "task-") {
		t.Fatalf("TaskID = %q, want a new task id", m.TaskID)
	}
}
