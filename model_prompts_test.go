package agentsociety_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// mtSystemPrompts runs a society on prompts and returns the system prompts
// of root and of a model-driven worker (role "dev", prompt "MARK-dev role
// prompt").
func mtSystemPrompts(t *testing.T, prompts fs.FS) (root, worker string, workerID string) {
	t.Helper()
	got := make(chan llm.Request, 2)
	model := llmtest.New(llmtest.Rule{Reply: func(req *llm.Request) (*llm.Response, error) {
		got <- *req
		return say(""), nil
	}})
	s := newSociety(t, as.Config{Model: model, Prompts: prompts})
	w := mtSpawn(t, s, "t1", "dev", "MARK-dev role prompt", nil)
	if _, err := s.SubmitRequirement(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	mtSendAs(t, s, as.RootID, w.ID, "go")
	for range 2 {
		req := mtRecv(t, got, "a model call")
		if req.Agent == as.RootID {
			root = req.System
		} else {
			worker = req.System
		}
	}
	return root, worker, w.ID
}

// mtDefaultPrompt reads one of the embedded default prompt files from the
// source tree.
func mtDefaultPrompt(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("internal", "prompts", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestPromptsOverrideBaseOnly(t *testing.T) {
	const base = "OVERRIDDEN BASE PROMPT"
	root, worker, _ := mtSystemPrompts(t, fstest.MapFS{"base.txt": {Data: []byte(base + "\n")}})
	rootTxt := mtDefaultPrompt(t, "root.txt")
	if !strings.HasPrefix(root, base) || !strings.HasPrefix(worker, base) {
		t.Errorf("the system prompts do not start with the overriding base.txt:\n%s\n---\n%s", root, worker)
	}
	if !strings.Contains(root, rootTxt) {
		t.Errorf("root's system prompt lacks the default root.txt:\n%s", root)
	}
	if strings.Contains(worker, rootTxt) {
		t.Errorf("a worker's system prompt holds root.txt:\n%s", worker)
	}
	if !strings.Contains(worker, "MARK-dev role prompt") {
		t.Errorf("the worker's system prompt lacks its role prompt:\n%s", worker)
	}
	for _, p := range []string{root, worker} {
		if strings.Contains(p, mtDefaultPrompt(t, "base.txt")) {
			t.Errorf("the default base.txt is still there:\n%s", p)
		}
		if !strings.Contains(p, "## 你的身份") {
			t.Errorf("the default runtime facts are gone:\n%s", p)
		}
	}
}

func TestPromptsOverrideRuntimeTemplate(t *testing.T) {
	root, worker, workerID := mtSystemPrompts(t, fstest.MapFS{"runtime.tmpl": {Data: []byte("{{.ID}}")}})
	if !strings.HasSuffix(root, "\n"+as.RootID) || !strings.HasSuffix(worker, "\n"+workerID) {
		t.Errorf("the system prompts do not end with the agent's id alone:\n%s\n---\n%s", root, worker)
	}
	for _, p := range []string{root, worker} {
		if strings.Contains(p, "## 你的身份") || strings.Contains(p, "## 联系人") || strings.Contains(p, "## 任务委托书") {
			t.Errorf("the default runtime facts are still there:\n%s", p)
		}
		if !strings.HasPrefix(p, mtDefaultPrompt(t, "base.txt")) {
			t.Errorf("the default base.txt is gone:\n%s", p)
		}
	}
	if !strings.Contains(root, mtDefaultPrompt(t, "root.txt")) {
		t.Errorf("root.txt is gone:\n%s", root)
	}
}

func TestPromptsBadRuntimeTemplateFailsNew(t *testing.T) {
	for _, tmpl := range []string{"{{.ID", "{{if .ID}}unclosed", "{{template \"missing\" .}} {{end}}"} {
		s, err := as.New(context.Background(), as.Config{Logger: quiet, Prompts: fstest.MapFS{"runtime.tmpl": {Data: []byte(tmpl)}}})
		if err == nil {
			s.Close(context.Background())
			t.Errorf("New accepted runtime.tmpl %q", tmpl)
			continue
		}
		if !strings.Contains(err.Error(), "runtime.tmpl") {
			t.Errorf("New's error %q does not name runtime.tmpl", err)
		}
	}
}

func TestPromptsFromADirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "prompts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"base.txt":     "DIR BASE\n",
		"root.txt":     "DIR ROOT\n",
		"runtime.tmpl": "id={{.ID}} role={{.Role}}{{if .Parent}} parent={{.Parent}}{{end}}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, worker, workerID := mtSystemPrompts(t, os.DirFS(dir))
	if want := "DIR BASE\n\nDIR ROOT\n\nid=root role=root"; root != want {
		t.Errorf("root's system prompt is %q, want %q", root, want)
	}
	if !strings.HasPrefix(worker, "DIR BASE") || !strings.Contains(worker, "MARK-dev role prompt") ||
		!strings.HasSuffix(worker, "id="+workerID+" role=dev parent=root（root）") || strings.Contains(worker, "DIR ROOT") {
		t.Errorf("the worker's system prompt is %q", worker)
	}
}

// TestDefaultPromptsTeachTheRules checks Requirement 6: root.txt explains the
// brief's five required fields, base.txt explains introductions and
// replying by the sender's id, and both insist that technical constraints
// are passed down as they are.
func TestDefaultPromptsTeachTheRules(t *testing.T) {
	// With base.txt blanked out, what root's prompt says comes from root.txt.
	rootOnly, _, _ := mtSystemPrompts(t, fstest.MapFS{"base.txt": {Data: []byte("B")}})
	rootPart := strings.TrimPrefix(rootOnly, "B")
	for _, want := range []string{"objective", "constraints", "inputs", "outputs", "completion_criteria", "spawn_agent", "静态网页", "Python"} {
		if !strings.Contains(rootPart, want) {
			t.Errorf("root.txt does not mention %q:\n%s", want, rootPart)
		}
	}
	// A worker's prompt has base.txt and no root.txt.
	root, worker, _ := mtSystemPrompts(t, nil)
	for _, want := range []string{"introduction_request", "introduction_response", "发送者 ID", "send_message", "constraints", "静态网页", "Python"} {
		if !strings.Contains(worker, want) {
			t.Errorf("base.txt does not mention %q:\n%s", want, worker)
		}
	}
	if !strings.Contains(root, rootPart) {
		t.Errorf("root's default prompt lacks root.txt")
	}
}
