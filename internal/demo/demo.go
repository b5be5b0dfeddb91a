// Package demo is the scripted model the quickstart and cli examples run
// on offline, with the requirement it answers.
//
// [Model] plays the seed 001 scenario through the society's real built-in
// tools: a user asks for a static web calculator; root creates a lead role
// and spawns one lead whose Task Brief carries the user's technical
// constraints and, in its inputs, the requirement itself; the spawn hands
// the lead its brief as its first message, a task_assignment, on which it
// starts. The lead creates a tester role (with an Interface Spec) and a
// developer role, spawns a tester, then a developer whose brief passes the
// constraints down and names the tester as a collaborator; the tester,
// briefed, waits for work. The developer, on its brief, stores the page
// with put_artifact and asks the tester for a review with a
// collaboration_request; the tester reads the artifact, checks it and
// answers with a collaboration_response; the developer reports to the lead
// with a status_report, and the lead sends the artifact reference to user.
//
// The script decides every step from the request alone, as a real model
// would: which agent is asking (the role line of its system prompt), what
// the message that opened its turn says, and which tool result just came
// back. It never assumes an id: roles, agents, artifacts and requests are
// named by what the tools returned and by the source lines and payloads of
// the delivered messages. Because of that the society's validation, routing
// and contact bookkeeping run exactly as they would for a real model, and a
// mistake in any of them stops the scenario.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	as "agentsociety"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// Requirement is the seed 001 requirement the examples submit: a calculator
// built as a static web page with HTML and JavaScript.
const Requirement = "请做一个计算器：静态网页，用 HTML + JavaScript 实现，支持加减乘除。"

// Page is the calculator page the demo developer writes and stores as an
// artifact: one self-contained HTML file with an inline script.
const Page = `<!doctype html>
<html lang="zh">
<head>
<meta charset="utf-8">
<title>计算器</title>
<style>
  body { font-family: sans-serif; max-width: 24em; margin: 2em auto; }
  input, select, button { font-size: 1.2em; margin: .2em; }
  output { font-weight: bold; }
</style>
</head>
<body>
<h1>计算器</h1>
<input id="a" type="number" value="6" aria-label="第一个数">
<select id="op" aria-label="运算">
  <option value="+">+</option><option value="-">−</option><option value="*">×</option><option value="/">÷</option>
</select>
<input id="b" type="number" value="7" aria-label="第二个数">
<button id="eq">=</button>
<output id="result"></output>
<script>
function calculate(a, op, b) {
  switch (op) {
  case '+': return a + b;
  case '-': return a - b;
  case '*': return a * b;
  case '/': return b === 0 ? NaN : a / b;
  }
  throw new Error('unknown operator ' + op);
}
document.getElementById('eq').addEventListener('click', function () {
  var a = parseFloat(document.getElementById('a').value);
  var b = parseFloat(document.getElementById('b').value);
  var r = calculate(a, document.getElementById('op').value, b);
  document.getElementById('result').textContent = isFinite(r) ? String(r) : '错误';
});
</script>
</body>
</html>
`

// What the default prompts show of each agent, which is how the script tells
// agents apart: root's prompt opens with root.txt, and every other agent's
// runtime facts name its role (see [script.RoleMark]).
const rootMark = "你是 root"

var (
	leadMark      = script.RoleMark("lead")
	developerMark = script.RoleMark("developer")
	testerMark    = script.RoleMark("tester")
)

// Run submits [Requirement] to s and waits until the message that carries
// the calculator's artifact reference reaches user, or ctx ends. It returns
// the task and that message.
func Run(ctx context.Context, s *as.Society) (task string, reply as.Message, err error) {
	task, err = s.SubmitRequirement(ctx, Requirement)
	if err != nil {
		return "", as.Message{}, err
	}
	reply, err = s.WaitForUserMessage(ctx, func(m as.Message) bool {
		return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
	})
	return task, reply, err
}

// Model returns a new scripted model that plays the scenario described in
// the package documentation. Each call returns a fresh model, with its own
// record of requests (see [llmtest.Model.RequestsFor]).
//
// The script is written for the society's default prompts. An agent that
// has sent what its turn was for (a spawn that hands over the work, a
// request, a report, an answer) ends the turn in the same call with
// end_turn, as the prompts ask; one with nothing to send ends it with a line
// of text, its thought. A message the script has no step for, such as a
// second message from the user to an agent, gets a short sensible answer
// rather than an error: an agent other than root that hears from user
// replies to user with who it is and what it is doing, and anything else
// ends the turn with a thought.
func Model() *llmtest.Model {
	m := llmtest.New(
		llmtest.Rule{Name: "a tool failed", When: script.LastToolFailed, Reply: script.ToolFailed},

		// root: one lead per requirement, briefed with it.
		llmtest.Rule{Name: "root: spawn the lead", SystemContains: rootMark, AfterTool: "create_role", Reply: rootSpawn},
		llmtest.Rule{Name: "root: a requirement", SystemContains: rootMark, When: script.FromUser, Reply: rootCreateRole},
		llmtest.Rule{Name: "root: anything else", SystemContains: rootMark, When: script.Delivered, Response: llmtest.Say("root 只受理用户需求；这条消息无需处理。")},

		// lead: on its brief, builds the team; then reports to user.
		llmtest.Rule{Name: "lead: spawned", SystemContains: leadMark, AfterTool: "spawn_agent", Reply: leadSpawned},
		llmtest.Rule{Name: "lead: role created", SystemContains: leadMark, AfterTool: "create_role", Reply: leadRoleCreated},
		llmtest.Rule{Name: "lead: a report", SystemContains: leadMark, When: script.DeliveredType(as.StatusReport), Reply: leadReport},
		llmtest.Rule{Name: "lead: the brief", SystemContains: leadMark, When: script.DeliveredType(as.TaskAssignment), Reply: leadCreateTester},

		// developer: on its brief, writes the page and asks the tester;
		// then reports.
		llmtest.Rule{Name: "developer: ask the tester", SystemContains: developerMark, AfterTool: "put_artifact", Reply: developerAsk},
		llmtest.Rule{Name: "developer: the review", SystemContains: developerMark, When: script.DeliveredType(as.CollaborationResponse), Reply: developerReport},
		llmtest.Rule{Name: "developer: the brief", SystemContains: developerMark, When: script.DeliveredType(as.TaskAssignment), Reply: developerWrite},

		// tester: waits for a request; reads the artifact, checks it, answers.
		llmtest.Rule{Name: "tester: check", SystemContains: testerMark, AfterTool: "get_artifact", Reply: testerCheck},
		llmtest.Rule{Name: "tester: a request", SystemContains: testerMark, When: script.DeliveredType(as.CollaborationRequest), Reply: testerRead},
		llmtest.Rule{Name: "tester: the brief", SystemContains: testerMark, When: script.DeliveredType(as.TaskAssignment), Response: llmtest.Say("委托书已收到：等开发者用 collaboration_request 发来页面再测试。")},

		// Anyone but root: a word from the user gets an answer.
		llmtest.Rule{Name: "anyone: the user speaks", When: script.FromUser, Reply: greetUser},
	)
	m.Fallback = script.Fallback
	return m
}

// ---- root ----

// techConstraints maps words of a requirement to the technical constraint
// root writes into the lead's brief, word for word as the prompts ask.
var techConstraints = []struct {
	words      []string
	constraint string
}{
	{[]string{"HTML", "JavaScript"}, "HTML + JavaScript"},
	{[]string{"静态", "static"}, "静态网页，无后端"},
	{[]string{"Python"}, "Python"},
}

func rootCreateRole(req *llm.Request) (*llm.Response, error) {
	return script.Call("create_role", map[string]any{
		"name": "lead",
		"rolePrompt": "你是需求负责人：对一个用户需求从头负责到尾。按需用 create_role 创建子岗位（开发、测试等）并 spawn_agent 组建团队，" +
			"把任务委托书里的技术约束原样写进每个子智能体的委托书；拿到经过测试的工件后，用 send_message 把工件引用发给 user。",
	}), nil
}

func rootSpawn(req *llm.Request) (*llm.Response, error) {
	role, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	text := script.TurnMessage(req).Text
	constraints := []string{} // none, said on purpose, when the user named none
	for _, c := range techConstraints {
		if slices.ContainsFunc(c.words, func(w string) bool { return strings.Contains(text, w) }) {
			constraints = append(constraints, c.constraint)
		}
	}
	// The spawn hands the lead its brief, which carries the requirement:
	// nothing is left for root to do.
	return script.Call("spawn_agent", map[string]any{
		"roleId": role.Str("roleId"),
		"taskBrief": as.TaskBrief{
			Objective:          "交付用户的需求：" + text,
			Constraints:        constraints,
			Inputs:             "用户需求原文：" + text,
			Outputs:            "经过测试的网页工件引用 artifact:<id>，用 send_message 发给 user",
			CompletionCriteria: "页面可直接在浏览器中打开，加减乘除结果正确，并经测试通过",
			Priority:           "high",
		},
		"end_turn": true,
	}), nil
}

// ---- lead ----

func leadCreateTester(req *llm.Request) (*llm.Response, error) {
	return script.Call("create_role", map[string]any{
		"name":       "tester",
		"rolePrompt": "你是测试员：收到 collaboration_request 后用 get_artifact 读取被测工件，对照任务委托书的约束逐项检查，再用 collaboration_response 回复结论。",
		"interface_spec": as.InterfaceSpec{
			Services:     "网页工件测试：对照约束检查页面，给出结论",
			InputFormat:  "collaboration_request：subtask_description 说明测什么，context.artifact 为工件引用 artifact:<id>",
			OutputFormat: "collaboration_response：status=completed，result_data={artifact, verdict: pass|fail, checks}",
		},
	}), nil
}

func leadRoleCreated(req *llm.Request) (*llm.Response, error) {
	role, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	switch role.Str("name") {
	case "tester":
		return script.Call("create_role", map[string]any{
			"name":       "developer",
			"rolePrompt": "你是前端开发：按任务委托书实现页面并用 put_artifact 保存，请预设的测试员用 collaboration_request 测试，再用 status_report 向父级汇报工件引用和测试结论。",
		}), nil
	case "developer":
		tester := script.RoleNamed(req, "tester")
		if tester == "" {
			return nil, errors.New("lead: no tester role was created this turn")
		}
		constraints, err := ownConstraints(req)
		if err != nil {
			return nil, err
		}
		return script.Call("spawn_agent", map[string]any{
			"roleId": tester,
			"taskBrief": as.TaskBrief{
				Objective:          "测试计算器页面：满足全部约束，加减乘除结果正确",
				Constraints:        constraints,
				Inputs:             "开发者用 collaboration_request 发来的工件引用",
				Outputs:            "collaboration_response：结论 pass|fail 与逐项检查",
				CompletionCriteria: "每条约束都检查过，四种运算都核对过",
			},
		}), nil
	}
	return nil, fmt.Errorf("lead: unexpected role %q", role.Str("name"))
}

func leadSpawned(req *llm.Request) (*llm.Response, error) {
	child, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	if child.Str("roleId") != script.RoleNamed(req, "tester") {
		return nil, fmt.Errorf("lead: spawned %s on an unexpected role %q", child.Str("agentId"), child.Str("roleId"))
	}
	constraints, err := ownConstraints(req)
	if err != nil {
		return nil, err
	}
	// The developer starts on its brief, which says everything it needs:
	// the lead's turn ends with the spawn.
	return script.Call("spawn_agent", map[string]any{
		"roleId": script.RoleNamed(req, "developer"),
		"taskBrief": as.TaskBrief{
			Objective:          "实现一个支持加减乘除的计算器网页",
			Constraints:        append(constraints, "static page: one self-contained calculator.html with an inline <script>; no server, no network requests"),
			Inputs:             "本任务委托书",
			Outputs:            "页面工件引用（put_artifact，media_type text/html），测试通过后用 status_report 汇报给父级",
			CompletionCriteria: "tester 的结论为 pass",
			Collaborators: []as.Collaborator{{
				AgentID:     child.Str("agentId"),
				Role:        "tester",
				Description: "页面写好后用 collaboration_request 请它测试，context.artifact 放工件引用",
			}},
		},
		"end_turn": true,
	}), nil
}

func leadReport(req *llm.Request) (*llm.Response, error) {
	m := script.TurnMessage(req)
	text := m.Text
	ref := script.RefIn(text)
	reply := "开发遇到问题，汇报如下：" + text
	if ref != "" && m.Payload["status"] == string(as.StatusCompleted) {
		reply = "您的计算器已完成并通过测试：" + ref + "（calculator.html：静态网页，HTML + JavaScript，用浏览器直接打开即可）。开发汇报：" + text
	}
	return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": reply}, "end_turn": true}), nil
}

// ---- developer ----

func developerWrite(req *llm.Request) (*llm.Response, error) {
	return script.Call("put_artifact", map[string]any{"name": "calculator.html", "media_type": "text/html", "content": Page}), nil
}

// developerAsk asks the tester its brief presets, which its system prompt
// lists among its contacts, to review the page just stored, and waits.
func developerAsk(req *llm.Request) (*llm.Response, error) {
	put, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	tester, ref := script.ContactWithRole(req.System, "tester"), put.Str("ref")
	if tester == "" || ref == "" {
		return nil, fmt.Errorf("developer: tester %q, artifact %q", tester, ref)
	}
	return script.Call("send_message", map[string]any{
		"to":           tester,
		"message_type": as.CollaborationRequest,
		"payload": map[string]any{
			"text":                "你好，我是 developer（" + req.Agent + "），lead 安排你测试我写的计算器页面。",
			"subtask_description": "测试计算器页面 " + ref + "：对照约束检查，核对加减乘除",
			"context":             map[string]any{"artifact": ref, "constraints": script.BriefList(req, "constraints")},
		},
		"end_turn": true,
	}), nil
}

func developerReport(req *llm.Request) (*llm.Response, error) {
	m := script.TurnMessage(req)
	var result struct {
		Artifact string `json:"artifact"`
		Verdict  string `json:"verdict"`
	}
	data, _ := json.Marshal(m.Payload["result_data"])
	json.Unmarshal(data, &result)
	status, _ := m.Payload["status"].(string)
	text := fmt.Sprintf("计算器页面 %s 已完成；tester（%s）结论：%s。", result.Artifact, m.From, result.Verdict)
	if status != string(as.StatusCompleted) || result.Verdict != "pass" {
		status = string(as.StatusError)
		text = fmt.Sprintf("计算器页面 %s 未通过测试：tester（%s）回复 %s %v。", result.Artifact, m.From, m.Payload["status"], m.Payload["error_message"])
	}
	parent := script.Parent(req.System)
	return script.Call("send_message", map[string]any{
		"to": parent, "message_type": as.StatusReport,
		"payload":  map[string]string{"status": status, "text": text},
		"end_turn": true,
	}), nil
}

// ---- tester ----

func testerRead(req *llm.Request) (*llm.Response, error) {
	ref := script.RefIn(script.TurnMessage(req).Content)
	if ref == "" {
		return nil, errors.New("tester: the request names no artifact")
	}
	return script.Call("get_artifact", map[string]string{"ref": ref}), nil
}

// checks are what the tester verifies in a page: the constraints of its
// brief, and that the calculator calculates.
var checks = []struct {
	name string
	ok   func(page string) bool
}{
	{"HTML + JavaScript：HTML 文档含内联 <script>", func(p string) bool {
		return strings.Contains(strings.ToLower(p), "<!doctype html") && strings.Contains(p, "<script>")
	}},
	{"静态网页，无后端：没有网络请求和表单提交", func(p string) bool {
		return !strings.Contains(p, "fetch(") && !strings.Contains(p, "XMLHttpRequest") && !strings.Contains(p, "<form")
	}},
	{"加减乘除四种运算都实现了", func(p string) bool {
		for _, op := range []string{"'+'", "'-'", "'*'", "'/'"} {
			if !strings.Contains(p, "case "+op) {
				return false
			}
		}
		return true
	}},
	{"除以零不会显示 Infinity", func(p string) bool { return strings.Contains(p, "b === 0") }},
}

func testerCheck(req *llm.Request) (*llm.Response, error) {
	art, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	m := script.TurnMessage(req)
	page := art.Str("content")
	verdict, done := "pass", []string{}
	for _, c := range checks {
		mark := "✓ "
		if !c.ok(page) {
			mark, verdict = "✗ ", "fail"
		}
		done = append(done, mark+c.name)
	}
	return script.Call("send_message", map[string]any{
		"to":           m.From,
		"message_type": as.CollaborationResponse,
		"payload": map[string]any{
			"request_id":  m.Payload["request_id"],
			"status":      as.StatusCompleted,
			"result_data": map[string]any{"artifact": art.Str("ref"), "verdict": verdict, "checks": done},
			"text":        "测试完成，结论：" + verdict,
		},
		"end_turn": true,
	}), nil
}

// ---- anyone ----

func greetUser(req *llm.Request) (*llm.Response, error) {
	role := script.Role(req.System)
	text := "你好，我是 " + role + "（" + req.Agent + "）。"
	if goal := script.BriefField(req, "objective"); goal != "" {
		text += "我负责：" + goal
	}
	return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": text}, "end_turn": true}), nil
}

// ownConstraints returns the constraints of the agent's own brief, which it
// passes down word for word.
func ownConstraints(req *llm.Request) ([]string, error) {
	c := script.BriefList(req, "constraints")
	if c == nil {
		return nil, errors.New("demo: the brief shows no constraints")
	}
	return c, nil
}
