// Command budget runs a society on a budget, offline on a scripted model,
// and prints what was spent, as a tree: the task, then each agent with a
// share, counting its descendants' spending with its own. The user's task
// may make 12 model calls; root gives the lead a share of 10, and the lead
// gives each of its two writers 3. The writers never stop drafting, so each runs out of
// its share and tells the lead; the lead then reports to the user.
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
	"agentsociety/examples/internal/show"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "budget:", err)
		os.Exit(1)
	}
}

// brief is a brief for the scripted agents.
const brief = `{"objective":"write the report","constraints":[],"inputs":"the user's requirement","outputs":"a report","completion_criteria":"the report is written"}`

// roleOf returns the role id a create_role result names.
func roleOf(req *llm.Request) string {
	var r struct {
		RoleID string `json:"roleId"`
	}
	json.Unmarshal([]byte(req.Messages[len(req.Messages)-1].Content), &r)
	return r.RoleID
}

// model scripts the society: each call reports 400 input and 50 output
// tokens.
func model() llm.Model {
	m := llmtest.New(
		llmtest.Rule{Name: "root: a lead role", Agent: as.RootID, LastContains: "【来自用户的消息】",
			Response: llmtest.Call("create_role", map[string]string{"name": "lead", "rolePrompt": "Own the report."})},
		llmtest.Rule{Name: "root: the lead, with a share of 10 calls", Agent: as.RootID, AfterTool: "create_role", Reply: func(req *llm.Request) (*llm.Response, error) {
			return llmtest.Call("spawn_agent", json.RawMessage(`{"roleId":"`+roleOf(req)+`","taskBrief":`+brief+`,"budget":{"model_calls":10},"end_turn":true}`)), nil
		}},
		llmtest.Rule{Name: "lead: a writer role", SystemContains: "Own the report.", LastContains: "task_assignment",
			Response: llmtest.Call("create_role", map[string]string{"name": "writer", "rolePrompt": "Draft sections."})},
		llmtest.Rule{Name: "lead: two writers, 3 calls each", SystemContains: "Own the report.", AfterTool: "create_role", Reply: func(req *llm.Request) (*llm.Response, error) {
			spawn := llm.ToolCall{Name: "spawn_agent", Arguments: json.RawMessage(`{"roleId":"` + roleOf(req) + `","taskBrief":` + brief + `,"budget":{"model_calls":3},"end_turn":true}`)}
			return llmtest.Calls(spawn, spawn), nil
		}},
		llmtest.Rule{Name: "lead: both writers out of budget", SystemContains: "Own the report.", LastContains: "budget_exhausted", Reply: func(req *llm.Request) (*llm.Response, error) {
			reports := 0
			for _, m := range req.Messages {
				if m.Role == llm.RoleUser && strings.Contains(m.Content, "budget_exhausted") {
					reports++
				}
			}
			if reports < 2 {
				return llmtest.Say(""), nil
			}
			return llmtest.Call("send_message", map[string]any{"to": "user", "message_type": "status_report",
				"payload": map[string]string{"status": "partial", "text": "The writers used their budgets; the draft so far is in their console lines."}, "end_turn": true}), nil
		}},
		llmtest.Rule{Name: "writer: drafts for ever", SystemContains: "Draft sections.",
			Response: llmtest.Call("console_print", map[string]string{"text": "drafting a section"})},
	)
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		resp, err := m.Generate(ctx, req)
		if resp != nil {
			resp.Usage = llm.Usage{InputTokens: 400, OutputTokens: 50}
		}
		return resp, err
	})
}

// run plays the task, printing to out, and closes the society. The
// society logs each budget that runs out at Warn level, to stderr.
func run(ctx context.Context, out io.Writer) (err error) {
	s, err := as.New(ctx, as.Config{
		Model:      model(),
		TaskBudget: as.Budget{ModelCalls: 12},
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer func() {
		// Close on a context of its own: ctx may be the one that ran out.
		if cerr := s.Close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
	}()
	task, err := s.SubmitRequirement(ctx, "Write a short report.")
	if err != nil {
		return err
	}
	m, err := s.WaitForUserMessage(ctx, func(m as.Message) bool { return m.TaskID == task })
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "user got from %s: %s\n\n", m.From, m.Text())

	// The tree: the task's spending, then each agent's with a share; an
	// agent's figures include its descendants'.
	u, ok := s.Usage(task)
	if !ok {
		return fmt.Errorf("no usage for task %s", task)
	}
	fmt.Fprintf(out, "task %s: %s\n", task, spent(u))
	return show.WriteTree(out, s, func(a as.Agent) string {
		if u, ok := s.AgentUsage(a.ID); ok {
			return a.ID + ": " + spent(u)
		}
		return a.ID
	})
}

// spent says what u spent of its budget.
func spent(u as.Usage) string {
	return fmt.Sprintf("%d/%d model calls, %d input and %d output tokens", u.ModelCalls, u.Budget.ModelCalls, u.InputTokens, u.OutputTokens)
}
