package agentsociety_test

import (
	"context"
	"strings"
	"testing"
	"time"

	as "agentsociety"
)

// TestRewrittenPayloadsKeepHTMLReadable checks that a payload the society
// rewrites (a collaboration request gets its request_id) still shows "<" and
// "&" as written, not as JSON's HTML escapes.
func TestRewrittenPayloadsKeepHTMLReadable(t *testing.T) {
	ctx := context.Background()
	got := make(chan as.Message, 1)
	s := newSociety(t, as.Config{DefaultBehavior: as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		return nil
	})})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "dev"})
	child, _, err := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Send(ctx, as.Outgoing{To: child.ID, Type: as.CollaborationRequest,
		Payload: as.CollaborationRequestPayload{SubtaskDescription: "check <script> & a > b"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if text := s.Format(m); !strings.Contains(text, "check <script> & a > b") {
			t.Fatalf("the receiver reads:\n%s", text)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not delivered")
	}
}

func TestUserConsoleShowsNoReplyHint(t *testing.T) {
	var console strings.Builder
	s := newSociety(t, as.Config{UserConsole: &console})
	root, _ := s.Actor(as.RootID)
	if _, err := root.SendText(context.Background(), as.UserID, "hello"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.WaitForUserMessage(ctx, nil); err != nil {
		t.Fatal(err)
	}
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
