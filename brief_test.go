package agentsociety_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	as "agentsociety"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// Property 1: Task Brief validation.

// drawBriefString draws a required string field: absent (""), blank (white
// space only) or present (non-blank, possibly padded). It reports whether the
// field is missing.
func drawBriefString(t *rapid.T, label string) (string, bool) {
	switch rapid.IntRange(0, 2).Draw(t, label+".kind") {
	case 0:
		return "", true
	case 1:
		return strings.Repeat(blanks.Draw(t, label+".blank"), rapid.IntRange(1, 3).Draw(t, label+".n")), true
	default:
		core := rapid.OneOf(
			rapid.StringMatching(`[A-Za-z0-9][A-Za-z0-9 .+-]{0,15}`),
			rapid.SampledFrom([]string{"创建一个简单的计算器程序", "在网页上显示计算结果", "x", "使用 HTML + JavaScript"}),
		).Draw(t, label+".value")
		return blanks.Draw(t, label+".pad1") + core + blanks.Draw(t, label+".pad2"), false
	}
}

func drawBrief(t *rapid.T) (*as.TaskBrief, []string) {
	var b as.TaskBrief
	var missing []string
	var miss bool
	if b.Objective, miss = drawBriefString(t, "objective"); miss {
		missing = append(missing, "objective")
	}
	switch rapid.IntRange(0, 2).Draw(t, "constraints.kind") {
	case 0: // nil: missing
		missing = append(missing, "constraints")
	case 1: // empty, non-nil: "no constraints", said on purpose
		b.Constraints = []string{}
	default: // items are free text, even blank ones
		b.Constraints = rapid.SliceOfN(rapid.OneOf(blanks, rapid.SampledFrom([]string{"静态网页", "Python", "no backend"})), 1, 4).Draw(t, "constraints")
	}
	if b.Inputs, miss = drawBriefString(t, "inputs"); miss {
		missing = append(missing, "inputs")
	}
	if b.Outputs, miss = drawBriefString(t, "outputs"); miss {
		missing = append(missing, "outputs")
	}
	if b.CompletionCriteria, miss = drawBriefString(t, "completion_criteria"); miss {
		missing = append(missing, "completion_criteria")
	}
	if rapid.Bool().Draw(t, "references?") {
		b.References = rapid.SliceOfN(rapid.SampledFrom([]string{"参考现有计算器应用的界面设计", "RFC 1149", ""}), 0, 3).Draw(t, "references")
	}
	b.Priority = rapid.SampledFrom([]string{"", "high", "low", " "}).Draw(t, "priority")
	if rapid.Bool().Draw(t, "collaborators?") {
		// Validate does not look at collaborators; the society does.
		b.Collaborators = []as.Collaborator{{AgentID: rapid.SampledFrom([]string{"agent-ui-designer", "user", "nobody"}).Draw(t, "collaborator"), Role: "UI设计师", Description: "如需界面设计建议，可联系此智能体"}}
	}
	return &b, missing
}

func TestProperty1_TaskBriefValidation(t *testing.T) {
	// A nil brief misses all five fields.
	var nilBrief *as.TaskBrief
	e := wantCode(t, nilBrief.Validate(), as.ErrInvalidTaskBrief)
	if diff := cmp.Diff([]string{"objective", "constraints", "inputs", "outputs", "completion_criteria"}, e.MissingFields); diff != "" {
		t.Fatalf("nil brief MissingFields (-want +got):\n%s", diff)
	}

	rapid.Check(t, func(t *rapid.T) {
		b, missing := drawBrief(t)
		err := b.Validate()
		if len(missing) == 0 {
			if err != nil {
				t.Fatalf("Validate(%+v) = %v, want nil", b, err)
			}
		} else {
			e := wantCode(t, err, as.ErrInvalidTaskBrief)
			if diff := cmp.Diff(missing, e.MissingFields); diff != "" {
				t.Fatalf("Validate(%+v) MissingFields (-want +got):\n%s", b, diff)
			}
		}

		// Through the society: a spawn succeeds iff the brief is valid, and a
		// refused spawn creates nothing and adds no contact.
		s, done := openSociety(t, as.Config{})
		defer done()
		ctx := context.Background()
		root := actorOf(t, s, as.RootID)
		role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "worker"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range rapid.IntRange(1, 3).Draw(t, "spawns") {
			b, missing := drawBrief(t)
			b.Collaborators = nil
			if rapid.Bool().Draw(t, "collaborate with user?") {
				b.Collaborators = []as.Collaborator{{AgentID: as.UserID, Description: "the person who asked"}}
			}
			agentsBefore, contactsBefore := s.Agents(), allContacts(t, s)
			child, reused, err := root.WithTask(fmt.Sprintf("task-%d", i)).SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: b})
			if len(missing) == 0 {
				if err != nil || reused {
					t.Fatalf("spawn with valid brief %+v: reused=%v err=%v", b, reused, err)
				}
				if got := s.Agents(); len(got) != len(agentsBefore)+1 || got[len(got)-1].ID != child.ID {
					t.Fatalf("after spawning %s, agents = %+v", child.ID, got)
				}
				if !s.IsKnown(as.RootID, child.ID) || !s.IsKnown(child.ID, as.RootID) {
					t.Fatalf("root and its child %s do not know each other", child.ID)
				}
				continue
			}
			e := wantCode(t, err, as.ErrInvalidTaskBrief)
			if diff := cmp.Diff(missing, e.MissingFields); diff != "" {
				t.Fatalf("refused spawn MissingFields (-want +got):\n%s", diff)
			}
			if child.ID != "" || reused {
				t.Fatalf("refused spawn returned %+v reused=%v", child, reused)
			}
			if diff := cmp.Diff(agentsBefore, s.Agents()); diff != "" {
				t.Fatalf("a refused spawn changed the agents (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(contactsBefore, allContacts(t, s)); diff != "" {
				t.Fatalf("a refused spawn changed registries (-before +after):\n%s", diff)
			}
		}
	})
}

// seed001Brief is the example Task Brief of seed 001 ("TaskBrief 数据模型"),
// verbatim.
const seed001Brief = `{
  "objective": "创建一个简单的计算器程序",
  "constraints": [
    "使用 HTML + JavaScript 实现",
    "必须是静态网页，不需要后端",
    "支持四则运算（加减乘除）"
  ],
  "inputs": "用户通过网页界面输入数字和运算符",
  "outputs": "在网页上显示计算结果",
  "completion_criteria": "计算器能正确执行加减乘除运算，界面美观易用",
  "collaborators": [
    {
      "agentId": "agent-ui-designer",
      "role": "UI设计师",
      "description": "如需界面设计建议，可联系此智能体"
    }
  ],
  "references": [
    "参考现有计算器应用的界面设计"
  ],
  "priority": "high"
}`

func TestCalculatorBriefFromSeed001(t *testing.T) {
	var b as.TaskBrief
	if err := json.Unmarshal([]byte(seed001Brief), &b); err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := as.TaskBrief{
		Objective: "创建一个简单的计算器程序",
		Constraints: []string{
			"使用 HTML + JavaScript 实现",
			"必须是静态网页，不需要后端",
			"支持四则运算（加减乘除）",
		},
		Inputs:             "用户通过网页界面输入数字和运算符",
		Outputs:            "在网页上显示计算结果",
		CompletionCriteria: "计算器能正确执行加减乘除运算，界面美观易用",
		Collaborators: []as.Collaborator{{
			AgentID:     "agent-ui-designer",
			Role:        "UI设计师",
			Description: "如需界面设计建议，可联系此智能体",
		}},
		References: []string{"参考现有计算器应用的界面设计"},
		Priority:   "high",
	}
	if diff := cmp.Diff(want, b); diff != "" {
		t.Fatalf("decoded brief (-want +got):\n%s", diff)
	}
}
