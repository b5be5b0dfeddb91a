package agentsociety_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// maxOverheadTokens is the budget of a model call's fixed overhead: the
// system prompt and the tool schemas, in o200k tokens.
const maxOverheadTokens = 1200

// promptCapture records the last request the model got for each agent.
type promptCapture struct {
	mu   sync.Mutex
	last map[string]*llm.Request
}

func (c *promptCapture) model() llm.Model {
	c.last = map[string]*llm.Request{}
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.last[req.Agent] = req
		return llmtest.Say(""), nil
	})
}

func (c *promptCapture) get(id string) *llm.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[id]
}

// orgTexts are the words the host and agents write in orgPrompts, in one
// language.
type orgTexts struct {
	requirement, leadRole, leadPrompt, workerPrompt, services, input, output, question string
}

var orgWords = map[as.Language]orgTexts{
	as.Chinese: {"做一个计算器网页", "负责人", "负责整个计算器需求：拆分工作、汇总结果并交付给用户。",
		"实现委托书要求的网页代码，用 put_artifact 交付。", "写前端代码", "任务委托书", "artifact 引用", "进展如何？"},
	as.English: {"Build a calculator web page", "lead", "Own the whole calculator requirement: split the work, gather the results and deliver them to the user.",
		"Write the web page code the brief asks for and deliver it with put_artifact.", "writes front-end code", "a task brief", "an artifact reference", "How is it going?"},
}

// orgPrompts builds root, a lead with children workers in a society of
// language lang and returns the requests of root, the lead (after its
// children were spawned) and a worker.
func orgPrompts(t *testing.T, lang as.Language, children int) (root, lead, worker *llm.Request) {
	t.Helper()
	ctx := context.Background()
	w := orgWords[lang]
	var c promptCapture
	s := newSociety(t, as.Config{Language: lang, Model: c.model()})
	task, err := s.SubmitRequirement(ctx, w.requirement)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "root's turn", func() bool { return c.get(as.RootID) != nil })
	leadAgent := rootSpawn(t, s, task, w.leadRole, w.leadPrompt, nil)
	leadActor := actorOf(t, s, leadAgent.ID)
	role, _, err := leadActor.CreateRole(ctx, as.RoleSpec{Name: "developer", Prompt: w.workerPrompt,
		InterfaceSpec: &as.InterfaceSpec{Services: w.services, InputFormat: w.input, OutputFormat: w.output}})
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for range children {
		k, _, err := leadActor.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, k.ID)
	}
	waitFor(t, "every worker's first turn", func() bool { return c.get(kids[len(kids)-1]) != nil })
	if _, err := s.SendTextToAgent(ctx, leadAgent.ID, w.question, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lead's turn on the user's message", func() bool {
		r := c.get(leadAgent.ID)
		return r != nil && strings.Contains(r.Messages[len(r.Messages)-1].Content, w.question)
	})
	return c.get(as.RootID), c.get(leadAgent.ID), c.get(kids[0])
}

// overhead returns the o200k token counts of req's system prompt and of its
// tool schemas as an OpenAI-compatible request sends them.
func overhead(t testing.TB, req *llm.Request) (system, tools int) {
	t.Helper()
	return o200k(t, req.System), o200k(t, wireTools(req.Tools))
}

// TestPromptOverhead prints, in each language, for root, a lead with three
// children and a worker, the system prompt and tool schemas a model
// receives, with their o200k token counts, and fails if the fixed overhead
// of any of them is over maxOverheadTokens. Run with -v to read them.
func TestPromptOverhead(t *testing.T) {
	for _, lang := range []as.Language{as.Chinese, as.English} {
		t.Run(string(lang), func(t *testing.T) {
			root, lead, worker := orgPrompts(t, lang, 3)
			for _, c := range []struct {
				name string
				req  *llm.Request
			}{{"root", root}, {"lead", lead}, {"worker", worker}} {
				sys, tools := overhead(t, c.req)
				schemas, _ := json.MarshalIndent(c.req.Tools, "", "  ")
				t.Logf("%s, %s: system prompt %d o200k tokens + tool schemas %d = %d\n--- system prompt ---\n%s\n--- tools ---\n%s", lang, c.name, sys, tools, sys+tools, c.req.System, schemas)
				if sys+tools > maxOverheadTokens {
					t.Errorf("%s, %s: fixed overhead %d o200k tokens, over the budget of %d", lang, c.name, sys+tools, maxOverheadTokens)
				}
			}
		})
	}
}

// TestPromptDoesNotGrowWithTheOrganisation: a lead's system prompt with 50
// children is at most a few tokens per child longer than with 5: a child
// is an id in a list, and its role's Interface Spec is shown once.
func TestPromptDoesNotGrowWithTheOrganisation(t *testing.T) {
	for _, lang := range []as.Language{as.Chinese, as.English} {
		t.Run(string(lang), func(t *testing.T) {
			_, small, _ := orgPrompts(t, lang, 5)
			_, large, _ := orgPrompts(t, lang, 50)
			s, _ := overhead(t, small)
			l, _ := overhead(t, large)
			perChild := float64(l-s) / 45
			t.Logf("%s: lead's system prompt: %d tokens with 5 children, %d with 50: %.1f tokens per child", lang, s, l, perChild)
			if perChild > 4 {
				t.Errorf("the lead's system prompt grows by %.1f tokens per child, want at most 4:\n%s", perChild, large.System)
			}
			if n := strings.Count(large.System, orgWords[lang].services); n != 1 {
				t.Errorf("the role's Interface Spec is shown %d times, want once:\n%s", n, large.System)
			}
		})
	}
}

// TestRootPromptDoesNotGrowWithTasks: root's system prompt is the same
// after twenty tasks, each with its lead, as after the first: it does not
// list its children, one per task ever submitted. Each message root reads
// ends instead with a line naming the lead of its task, or saying it has
// none yet.
func TestRootPromptDoesNotGrowWithTasks(t *testing.T) {
	for _, c := range []struct {
		lang         as.Language
		noLead, lead string // the last lines, with %s for the task and the lead
	}{
		{as.English, "[Task %s: no lead yet]", "[Task %s: its lead is %s (lead)]"},
		{as.Chinese, "【任务 %s：尚无负责人】", "【任务 %s：负责人是 lead（%s）】"},
	} {
		t.Run(string(c.lang), func(t *testing.T) {
			ctx := context.Background()
			var pc promptCapture
			s := newSociety(t, as.Config{Language: c.lang, Model: pc.model()})
			var first *llm.Request
			var leads []string
			var tasks []string
			for i := range 20 {
				task, err := s.SubmitRequirement(ctx, fmt.Sprint("requirement ", i))
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, "root's turn on "+task, func() bool {
					r := pc.get(as.RootID)
					return r != nil && strings.Contains(r.Messages[len(r.Messages)-1].Content, fmt.Sprint("requirement ", i))
				})
				r := pc.get(as.RootID)
				if got, want := r.Messages[len(r.Messages)-1].Content, "\n"+fmt.Sprintf(c.noLead, task); !strings.HasSuffix(got, want) {
					t.Fatalf("root's message on a new task reads %q, want it to end with %q", got, want)
				}
				if first == nil {
					first = r
				}
				tasks = append(tasks, task)
				leads = append(leads, rootSpawn(t, s, task, "lead", "lead the task", nil).ID)
			}
			if _, err := s.SendTextToAgent(ctx, as.RootID, "how is the first one going?", tasks[0]); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "root's turn on the user's question", func() bool {
				r := pc.get(as.RootID)
				return strings.Contains(r.Messages[len(r.Messages)-1].Content, "how is the first one going?")
			})
			r := pc.get(as.RootID)
			if r.System != first.System {
				t.Errorf("root's system prompt changed after 20 tasks and their leads:\n--- first ---\n%s\n--- now ---\n%s", first.System, r.System)
			}
			for _, id := range leads {
				if strings.Contains(r.System, id) {
					t.Errorf("root's system prompt names lead %s:\n%s", id, r.System)
				}
			}
			if got, want := r.Messages[len(r.Messages)-1].Content, "\n"+fmt.Sprintf(c.lead, tasks[0], leads[0]); !strings.HasSuffix(got, want) {
				t.Errorf("root's message on the first task reads %q, want it to end with %q", got, want)
			}
		})
	}
}
