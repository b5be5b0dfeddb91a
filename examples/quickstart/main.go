// Command quickstart runs the seed 001 scenario offline with code-driven
// agents: a user asks for a static web calculator; root creates a lead role
// and one lead; the lead creates a developer and a tester, whose briefs pass
// the "HTML + JavaScript, static page" constraints down and introduce the
// developer to the tester; the developer stores the page as an artifact and
// asks the tester for a review; the lead reports the artifact to the user.
//
// Every message is printed as the receiving agent sees it, and the
// organisation at the end.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	as "agentsociety"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

const page = `<!doctype html>
<title>Calculator</title>
<input id="a"> <select id="op"><option>+</option><option>-</option><option>*</option><option>/</option></select> <input id="b">
<button onclick="r.textContent = calc(+a.value, op.value, +b.value)">=</button> <span id="r"></span>
<script>
function calc(x, op, y) { return op === '+' ? x + y : op === '-' ? x - y : op === '*' ? x * y : x / y; }
</script>
`

// review is the tester's result_data.
type review struct {
	Artifact string `json:"artifact"`
	Verdict  string `json:"verdict"`
}

var constraints = []string{"HTML + JavaScript", "a static page: no backend", "the four operations: + - * /"}

func run(ctx context.Context, out io.Writer) error {
	var s *as.Society
	// shown wraps a behaviour so that each message is printed as its
	// receiver sees it before it is handled.
	shown := func(b as.BehaviorFunc) as.Behavior {
		return as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			fmt.Fprintf(out, "── to %s ──\n%s\n\n", self.ID(), s.Format(m))
			return b(ctx, self, m)
		})
	}

	tester := shown(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Type != as.CollaborationRequest {
			return nil
		}
		var req as.CollaborationRequestPayload
		if err := m.Decode(&req); err != nil {
			return err
		}
		ref := strings.Trim(string(req.Context), `"`)
		_, data, err := self.GetArtifact(ctx, ref)
		if err != nil {
			return err
		}
		verdict := "pass: a static page with the four operations"
		if !strings.Contains(string(data), "<script>") {
			verdict = "fail: no script"
		}
		result, _ := json.Marshal(review{Artifact: ref, Verdict: verdict})
		_, err = self.Send(ctx, as.Outgoing{To: m.From, Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{
			RequestID: req.RequestID, Status: as.StatusCompleted, ResultData: result,
		}})
		return err
	})

	developer := shown(func(ctx context.Context, self *as.Actor, m as.Message) error {
		switch m.Type {
		case as.TaskAssignment:
			art, err := self.PutArtifact(ctx, as.ArtifactSpec{Name: "calculator.html", MediaType: "text/html", Data: []byte(page)})
			if err != nil {
				return err
			}
			tester := self.Agent().Brief.Collaborators[0].AgentID
			_, err = self.Send(ctx, as.Outgoing{To: tester, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{
				SubtaskDescription: "Review the calculator page against the brief's constraints.",
				Context:            []byte(`"` + art.Ref() + `"`),
			}})
			return err
		case as.CollaborationResponse:
			var resp as.CollaborationResponsePayload
			var r review
			if err := m.Decode(&resp); err != nil {
				return err
			}
			if err := json.Unmarshal(resp.ResultData, &r); err != nil {
				return err
			}
			_, err := self.Send(ctx, as.Outgoing{To: self.Agent().ParentID, Type: as.StatusReport, Payload: as.StatusReportPayload{
				Status: "done", Text: r.Artifact + " reviewed by " + m.From + ": " + r.Verdict,
			}})
			return err
		}
		return nil
	})

	lead := shown(func(ctx context.Context, self *as.Actor, m as.Message) error {
		switch m.Type {
		case as.TaskAssignment:
			testerRole, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "tester", Prompt: "Review web pages against their brief.",
				InterfaceSpec: &as.InterfaceSpec{Services: "reviews a web page", InputFormat: "collaboration_request with an artifact reference as context", OutputFormat: "collaboration_response with a verdict"}})
			if err != nil {
				return err
			}
			devRole, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "developer", Prompt: "Build web pages."})
			if err != nil {
				return err
			}
			t, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: testerRole.ID, Behavior: tester, Brief: &as.TaskBrief{
				Objective: "review the calculator page", Constraints: constraints,
				Inputs: "an artifact reference from the developer", Outputs: "a verdict", CompletionCriteria: "every constraint checked",
			}})
			if err != nil {
				return err
			}
			d, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: devRole.ID, Behavior: developer, Brief: &as.TaskBrief{
				Objective: "build the calculator page", Constraints: constraints,
				Inputs: "this brief", Outputs: "the page as an artifact", CompletionCriteria: "the tester passes it",
				Collaborators: []as.Collaborator{{AgentID: t.ID, Role: "tester", Description: "ask for a review when the page is ready"}},
			}})
			if err != nil {
				return err
			}
			_, err = self.Send(ctx, as.Outgoing{To: d.ID, Type: as.TaskAssignment, Payload: d.Brief})
			return err
		case as.StatusReport:
			_, err := self.SendText(ctx, as.UserID, "Your calculator is ready: "+m.Text())
			return err
		}
		return nil
	})

	root := shown(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "Own one requirement end to end."})
		if err != nil {
			return err
		}
		brief := &as.TaskBrief{Objective: m.Text(), Constraints: constraints, Inputs: "the user's requirement",
			Outputs: "an artifact reference reported to user", CompletionCriteria: "a tested page"}
		l, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: brief, Behavior: lead})
		if err != nil {
			return err
		}
		_, err = self.Send(ctx, as.Outgoing{To: l.ID, Type: as.TaskAssignment, Payload: brief})
		return err
	})

	s, err := as.New(ctx, as.Config{Root: root, UserConsole: out, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	if _, err := s.SubmitRequirement(ctx, "做一个静态网页计算器（HTML + JavaScript）"); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.WaitForUserMessage(wctx, nil); err != nil {
		return err
	}
	fmt.Fprintln(out, "── organisation ──")
	printTree(out, s, as.RootID, 0)
	return nil
}

func printTree(out io.Writer, s *as.Society, id string, depth int) {
	a, _ := s.Agent(id)
	label := id
	if r, ok := s.Role(a.RoleID); ok {
		label += " (" + r.Name + ")"
	}
	fmt.Fprintf(out, "%s%s\n", strings.Repeat("  ", depth), label)
	for _, c := range s.Agents() {
		if c.ParentID == id {
			printTree(out, s, c.ID, depth+1)
		}
	}
}
