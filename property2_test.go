package agentsociety_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	as "agentsociety"
	"agentsociety/llm"
)

// briefText draws a non-blank single-line string for a brief field.
func briefText(label string) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		return strings.TrimSpace(rapid.StringMatching(`[a-zA-Z0-9 ,.+]{0,20}|静态网页|HTML \+ JavaScript|Python`).Draw(t, label)) + "·" + label
	})
}

func TestProperty2_TaskBriefInjectedIntoContext(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		brief := &as.TaskBrief{
			Objective:          briefText("objective").Draw(t, "objective"),
			Constraints:        rapid.SliceOfN(briefText("constraint"), 0, 4).Draw(t, "constraints"),
			Inputs:             briefText("inputs").Draw(t, "inputs"),
			Outputs:            briefText("outputs").Draw(t, "outputs"),
			CompletionCriteria: briefText("criteria").Draw(t, "criteria"),
		}
		if rapid.Bool().Draw(t, "references?") {
			brief.References = rapid.SliceOfN(briefText("reference"), 1, 3).Draw(t, "references")
		}
		if rapid.Bool().Draw(t, "priority?") {
			brief.Priority = rapid.SampledFrom([]string{"high", "low", "紧急"}).Draw(t, "priority")
		}
		withCollaborator := rapid.Bool().Draw(t, "collaborator?")

		// Only the child is sent a message, so the first request is its.
		first := make(chan *llm.Request, 1)
		model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
			select {
			case first <- req:
			default:
			}
			return say(""), nil
		})
		ctx := context.Background()
		s, err := as.New(ctx, as.Config{Model: model, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		root, _ := s.Actor(as.RootID)
		role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "worker", Prompt: "work"})
		if withCollaborator {
			helper, _, err := root.WithTask("other").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
			if err != nil {
				t.Fatal(err)
			}
			brief.Collaborators = []as.Collaborator{{AgentID: helper.ID, Role: "helper", Description: briefText("collab").Draw(t, "collab")}}
		}
		child, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: brief})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SendTextToAgent(ctx, child.ID, "start", ""); err != nil {
			t.Fatal(err)
		}
		var req *llm.Request
		select {
		case req = <-first:
		case <-time.After(5 * time.Second):
			t.Fatal("the child was never called")
		}
		if req.Agent != child.ID {
			t.Fatalf("first call for %s, want %s", req.Agent, child.ID)
		}
		want := []string{brief.Objective, brief.Inputs, brief.Outputs, brief.CompletionCriteria, brief.Priority}
		want = append(want, brief.Constraints...)
		want = append(want, brief.References...)
		for _, c := range brief.Collaborators {
			want = append(want, c.AgentID, c.Description)
		}
		for _, w := range want {
			if !strings.Contains(req.System, w) {
				t.Fatalf("the child's first request lacks %q:\n%s", w, req.System)
			}
		}
		if len(brief.Constraints) == 0 && !strings.Contains(req.System, "constraints:\n  (none)") {
			t.Fatalf("an empty constraints list must be shown as such:\n%s", req.System)
		}
	})
}
