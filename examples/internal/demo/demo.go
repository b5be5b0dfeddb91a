// Package demo is the scripted model the examples run on offline, and the
// few helpers they share.
//
// [Model] plays the seed 001 scenario through the society's real built-in
// tools: a user asks for a static web calculator; root creates a lead role
// and spawns one lead whose Task Brief carries the user's technical
// constraints; the lead creates a tester role (with an Interface Spec) and a
// developer role, spawns a tester, then a developer whose brief passes the
// constraints down and names the tester as a collaborator; the developer
// stores the page with put_artifact and asks the tester for a review with a
// collaboration_request; the tester reads the artifact, checks it and answers
// with a collaboration_response; the developer reports to the lead with a
// status_report, and the lead sends the artifact reference to user.
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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
	"agentsociety/llm/openai"
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
// agents apart: root's prompt opens with root.txt, and every agent's runtime
// facts carry the line "- 岗位：{role}".
const (
	rootMark      = "你是 root"
	leadMark      = "岗位：lead\n"
	developerMark = "岗位：developer\n"
	testerMark    = "岗位：tester\n"
)

// Model returns a new scripted model that plays the scenario described in
// the package documentation. Each call returns a fresh model, with its own
// record of requests (see [llmtest.Model.RequestsFor]).
//
// The script is written for the society's default prompts. Every agent ends
// each turn with a line of text, its thought, after its last tool call. A
// message the script has no step for, such as a second message from the
// user to an agent, gets a short sensible answer rather than an error: an
// agent other than root that hears from user replies to user with who it is
// and what it is doing, and anything else ends the turn with a thought.
func Model() *llmtest.Model {
	m := llmtest.New(
		llmtest.Rule{Name: "a tool failed", When: lastToolFailed, Reply: toolFailed},
		llmtest.Rule{Name: "answered user", AfterTool: "send_message", When: answeringUser, Response: llmtest.Say("已回复用户。")},

		// root: one lead per requirement.
		llmtest.Rule{Name: "root: handed over", SystemContains: rootMark, AfterTool: "send_message", Reply: rootDone},
		llmtest.Rule{Name: "root: brief the lead", SystemContains: rootMark, AfterTool: "spawn_agent", Reply: rootForward},
		llmtest.Rule{Name: "root: spawn the lead", SystemContains: rootMark, AfterTool: "create_role", Reply: rootSpawn},
		llmtest.Rule{Name: "root: a requirement", SystemContains: rootMark, When: fromUser, Reply: rootCreateRole},
		llmtest.Rule{Name: "root: anything else", SystemContains: rootMark, When: delivered, Response: llmtest.Say("root 只受理用户需求；这条消息无需处理。")},

		// lead: builds the team, then reports to user.
		llmtest.Rule{Name: "lead: sent", SystemContains: leadMark, AfterTool: "send_message", Reply: leadSent},
		llmtest.Rule{Name: "lead: spawned", SystemContains: leadMark, AfterTool: "spawn_agent", Reply: leadSpawned},
		llmtest.Rule{Name: "lead: role created", SystemContains: leadMark, AfterTool: "create_role", Reply: leadRoleCreated},
		llmtest.Rule{Name: "lead: a report", SystemContains: leadMark, When: deliveredType(as.StatusReport), Reply: leadReport},
		llmtest.Rule{Name: "lead: the requirement", SystemContains: leadMark, When: fromRole("root"), Reply: leadCreateTester},

		// developer: writes the page, asks the tester, reports.
		llmtest.Rule{Name: "developer: sent", SystemContains: developerMark, AfterTool: "send_message", Reply: developerSent},
		llmtest.Rule{Name: "developer: ask the tester", SystemContains: developerMark, AfterTool: "list_contacts", Reply: developerAsk},
		llmtest.Rule{Name: "developer: find the tester", SystemContains: developerMark, AfterTool: "put_artifact", Response: call("list_contacts", nil)},
		llmtest.Rule{Name: "developer: the review", SystemContains: developerMark, When: deliveredType(as.CollaborationResponse), Reply: developerReport},
		llmtest.Rule{Name: "developer: the task", SystemContains: developerMark, When: fromRole("lead"), Reply: developerWrite},

		// tester: reads the artifact, checks it, answers.
		llmtest.Rule{Name: "tester: answered", SystemContains: testerMark, AfterTool: "send_message", Reply: testerSent},
		llmtest.Rule{Name: "tester: check", SystemContains: testerMark, AfterTool: "get_artifact", Reply: testerCheck},
		llmtest.Rule{Name: "tester: a request", SystemContains: testerMark, When: deliveredType(as.CollaborationRequest), Reply: testerRead},

		// Anyone but root: a word from the user gets an answer.
		llmtest.Rule{Name: "anyone: the user speaks", When: fromUser, Reply: greetUser},
	)
	m.Fallback = func(req *llm.Request) (*llm.Response, error) {
		return llmtest.Say("（演示脚本没有为这一步准备动作，本轮到此为止。）"), nil
	}
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
	return call("create_role", map[string]any{
		"name": "lead",
		"rolePrompt": "你是需求负责人：对一个用户需求从头负责到尾。按需用 create_role 创建子岗位（开发、测试等）并 spawn_agent 组建团队，" +
			"把任务委托书里的技术约束原样写进每个子智能体的委托书；拿到经过测试的工件后，用 send_message 把工件引用发给 user。",
	}), nil
}

func rootSpawn(req *llm.Request) (*llm.Response, error) {
	role, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	text := turnMessage(req).Text
	constraints := []string{} // none, said on purpose, when the user named none
	for _, c := range techConstraints {
		if slices.ContainsFunc(c.words, func(w string) bool { return strings.Contains(text, w) }) {
			constraints = append(constraints, c.constraint)
		}
	}
	return call("spawn_agent", map[string]any{
		"roleId": role.str("roleId"),
		"taskBrief": as.TaskBrief{
			Objective:          "交付用户的需求：" + text,
			Constraints:        constraints,
			Inputs:             "用户的需求原文（root 随后发来）",
			Outputs:            "经过测试的网页工件引用 artifact:<id>，用 send_message 发给 user",
			CompletionCriteria: "页面可直接在浏览器中打开，加减乘除结果正确，并经测试通过",
			Priority:           "high",
		},
	}), nil
}

func rootForward(req *llm.Request) (*llm.Response, error) {
	lead, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	return call("send_message", map[string]any{
		"to":      lead.str("agentId"),
		"payload": map[string]string{"text": turnMessage(req).Text},
	}), nil
}

func rootDone(req *llm.Request) (*llm.Response, error) {
	sent, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	return llmtest.Say("已为这个需求创建负责人 " + sent.str("to") + "，并把需求原文转交给它。"), nil
}

// ---- lead ----

func leadCreateTester(req *llm.Request) (*llm.Response, error) {
	return call("create_role", map[string]any{
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
	role, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	switch role.str("name") {
	case "tester":
		return call("create_role", map[string]any{
			"name":       "developer",
			"rolePrompt": "你是前端开发：按任务委托书实现页面并用 put_artifact 保存，请预设的测试员用 collaboration_request 测试，再用 status_report 向父级汇报工件引用和测试结论。",
		}), nil
	case "developer":
		tester := roleNamed(req, "tester")
		if tester == "" {
			return nil, errors.New("lead: no tester role was created this turn")
		}
		constraints, err := ownConstraints(req)
		if err != nil {
			return nil, err
		}
		return call("spawn_agent", map[string]any{
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
	return nil, fmt.Errorf("lead: unexpected role %q", role.str("name"))
}

func leadSpawned(req *llm.Request) (*llm.Response, error) {
	child, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	switch child.str("roleId") {
	case roleNamed(req, "tester"):
		constraints, err := ownConstraints(req)
		if err != nil {
			return nil, err
		}
		return call("spawn_agent", map[string]any{
			"roleId": roleNamed(req, "developer"),
			"taskBrief": as.TaskBrief{
				Objective:          "实现一个支持加减乘除的计算器网页",
				Constraints:        append(constraints, "static page: one self-contained calculator.html with an inline <script>; no server, no network requests"),
				Inputs:             "本任务委托书",
				Outputs:            "页面工件引用（put_artifact，media_type text/html），测试通过后用 status_report 汇报给父级",
				CompletionCriteria: "tester 的结论为 pass",
				Collaborators: []as.Collaborator{{
					AgentID:     child.str("agentId"),
					Role:        "tester",
					Description: "页面写好后用 collaboration_request 请它测试，context.artifact 放工件引用",
				}},
			},
		}), nil
	case roleNamed(req, "developer"):
		tester := spawnedOn(req, roleNamed(req, "tester"))
		return call("send_message", map[string]any{
			"to": child.str("agentId"),
			"payload": map[string]string{"text": "请按任务委托书实现计算器页面。写好后请你的预设协作者 tester（" + tester +
				"）测试，通过后用 status_report 把工件引用汇报给我。"},
		}), nil
	}
	return nil, fmt.Errorf("lead: spawned %s on an unexpected role %q", child.str("agentId"), child.str("roleId"))
}

func leadReport(req *llm.Request) (*llm.Response, error) {
	m := turnMessage(req)
	text := m.Text
	ref := refIn(text)
	reply := "开发遇到问题，汇报如下：" + text
	if ref != "" && m.Payload["status"] == as.StatusCompleted {
		reply = "您的计算器已完成并通过测试：" + ref + "（calculator.html：静态网页，HTML + JavaScript，用浏览器直接打开即可）。开发汇报：" + text
	}
	return call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": reply}}), nil
}

func leadSent(req *llm.Request) (*llm.Response, error) {
	sent, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	if sent.str("to") == as.UserID {
		return llmtest.Say("结果已交给用户。"), nil
	}
	return llmtest.Say("团队已组建：tester " + spawnedOn(req, roleNamed(req, "tester")) + "，developer " + sent.str("to") + "；等待开发汇报。"), nil
}

// ---- developer ----

func developerWrite(req *llm.Request) (*llm.Response, error) {
	return call("put_artifact", map[string]any{"name": "calculator.html", "media_type": "text/html", "content": Page}), nil
}

func developerAsk(req *llm.Request) (*llm.Response, error) {
	list, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	var contacts struct {
		Contacts []struct{ ID, Role string } `json:"contacts"`
	}
	if err := json.Unmarshal(list.raw, &contacts); err != nil {
		return nil, fmt.Errorf("developer: list_contacts: %w", err)
	}
	tester := ""
	for _, c := range contacts.Contacts {
		if c.Role == "tester" {
			tester = c.ID
			break
		}
	}
	ref := ""
	if put := results(req, "put_artifact"); len(put) > 0 {
		ref = put[len(put)-1].str("ref")
	}
	if tester == "" || ref == "" {
		return nil, fmt.Errorf("developer: tester %q, artifact %q", tester, ref)
	}
	return call("send_message", map[string]any{
		"to":           tester,
		"message_type": as.CollaborationRequest,
		"payload": map[string]any{
			"text":                "你好，我是 developer（" + req.Agent + "），lead 安排你测试我写的计算器页面。",
			"subtask_description": "测试计算器页面 " + ref + "：对照约束检查，核对加减乘除",
			"context":             map[string]any{"artifact": ref, "constraints": briefList(req.System, "constraints")},
		},
	}), nil
}

func developerReport(req *llm.Request) (*llm.Response, error) {
	m := turnMessage(req)
	var result struct {
		Artifact string `json:"artifact"`
		Verdict  string `json:"verdict"`
	}
	data, _ := json.Marshal(m.Payload["result_data"])
	json.Unmarshal(data, &result)
	status, _ := m.Payload["status"].(string)
	text := fmt.Sprintf("计算器页面 %s 已完成；tester（%s）结论：%s。", result.Artifact, m.From, result.Verdict)
	if status != as.StatusCompleted || result.Verdict != "pass" {
		status = as.StatusError
		text = fmt.Sprintf("计算器页面 %s 未通过测试：tester（%s）回复 %s %v。", result.Artifact, m.From, m.Payload["status"], m.Payload["error_message"])
	}
	parent := match(parentRe, req.System)
	return call("send_message", map[string]any{
		"to": parent, "message_type": as.StatusReport,
		"payload": map[string]string{"status": status, "text": text},
	}), nil
}

func developerSent(req *llm.Request) (*llm.Response, error) {
	sent, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	if sent.str("message_type") == string(as.CollaborationRequest) {
		return llmtest.Say("页面已保存，已请 tester " + sent.str("to") + " 测试（request " + sent.str("request_id") + "），等待结论。"), nil
	}
	return llmtest.Say("已向 " + sent.str("to") + " 汇报。"), nil
}

// ---- tester ----

func testerRead(req *llm.Request) (*llm.Response, error) {
	ref := refIn(turnMessage(req).Content)
	if ref == "" {
		return nil, errors.New("tester: the request names no artifact")
	}
	return call("get_artifact", map[string]string{"ref": ref}), nil
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
	art, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	m := turnMessage(req)
	page := art.str("content")
	verdict, done := "pass", []string{}
	for _, c := range checks {
		mark := "✓ "
		if !c.ok(page) {
			mark, verdict = "✗ ", "fail"
		}
		done = append(done, mark+c.name)
	}
	return call("send_message", map[string]any{
		"to":           m.From,
		"message_type": as.CollaborationResponse,
		"payload": map[string]any{
			"request_id":  m.Payload["request_id"],
			"status":      as.StatusCompleted,
			"result_data": map[string]any{"artifact": art.str("ref"), "verdict": verdict, "checks": done},
			"text":        "测试完成，结论：" + verdict,
		},
	}), nil
}

func testerSent(req *llm.Request) (*llm.Response, error) {
	sent, err := lastResult(req)
	if err != nil {
		return nil, err
	}
	return llmtest.Say("测试结论已回复 " + sent.str("to") + "。"), nil
}

// ---- anyone ----

func greetUser(req *llm.Request) (*llm.Response, error) {
	role := match(roleRe, req.System)
	text := "你好，我是 " + role + "（" + req.Agent + "）。"
	if goal := briefField(req.System, "objective"); goal != "" {
		text += "我负责：" + goal
	}
	return call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": text}}), nil
}

func toolFailed(req *llm.Request) (*llm.Response, error) {
	return llmtest.Say("工具调用失败：" + req.Messages[len(req.Messages)-1].Content + "。演示脚本不再重试，本轮到此为止。"), nil
}

// call is a reply that calls one tool with args encoded as JSON the way
// models write it: "<" stays "<", where json.Marshal would write \u003c.
func call(name string, args any) *llm.Response {
	if args == nil {
		return llmtest.Call(name, nil)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(args); err != nil {
		panic(fmt.Sprintf("demo: the arguments of %s: %v", name, err))
	}
	return llmtest.Call(name, json.RawMessage(strings.TrimSpace(b.String())))
}

// ---- reading requests ----

var (
	sourceRe = regexp.MustCompile(`【来自 (.+?)（([^（）]+)）的消息】`)
	refRe    = regexp.MustCompile(`artifact:[A-Za-z0-9-]+`)
	roleRe   = regexp.MustCompile(`(?m)^- 岗位：(.+)$`)
	parentRe = regexp.MustCompile(`(?m)^- 父级：([^（\s]+)`)
)

func match(re *regexp.Regexp, s string) string {
	if m := re.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

func refIn(s string) string { return refRe.FindString(s) }

// turnStart returns the index of the delivered message that opened the
// current turn: the newest message from the society rather than a tool.
func turnStart(msgs []llm.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			return i
		}
	}
	return -1
}

// message is a delivered message as the agent reads it.
type message struct {
	Content  string         // as presented (Requirement 10)
	From     string         // the sender's id from the source line; "user" for the user
	FromRole string         // the sender's role from the source line
	Text     string         // the content without the source line and the reply hint
	Type     string         // message_type, "" for a general message
	Payload  map[string]any // the structured payload of a typed message, and its text
}

// turnMessage reads the message that opened the current turn.
func turnMessage(req *llm.Request) message {
	i := turnStart(req.Messages)
	if i < 0 {
		return message{}
	}
	return parseMessage(req.Messages[i].Content)
}

func parseMessage(content string) message {
	m := message{Content: content, Payload: map[string]any{}}
	body := content
	if rest, ok := strings.CutPrefix(content, "【来自用户的消息】\n"); ok {
		m.From, m.FromRole, body = as.UserID, as.UserID, rest
	} else if s := sourceRe.FindStringSubmatchIndex(content); s != nil && s[0] == 0 {
		m.FromRole, m.From = content[s[2]:s[3]], content[s[4]:s[5]]
		body = strings.TrimPrefix(content[s[1]:], "\n")
	}
	if i := strings.LastIndex(body, "\n如需回复，请使用 send_message("); i >= 0 {
		body = body[:i]
	}
	m.Text = body
	// A typed message reads "{text}\nmessage_type: {type}\n{payload as JSON}".
	if i := strings.Index(body, "message_type: "); i >= 0 && (i == 0 || body[i-1] == '\n') {
		head, rest, _ := strings.Cut(body[i+len("message_type: "):], "\n")
		m.Type = head
		json.Unmarshal([]byte(rest), &m.Payload)
		m.Text = strings.TrimSuffix(body[:i], "\n")
	}
	if m.Text != "" {
		if _, ok := m.Payload["text"]; !ok {
			m.Payload["text"] = m.Text
		}
	}
	return m
}

// answeringUser reports whether an agent other than root is in a turn
// opened by a message from user: root takes such a message as a requirement.
func answeringUser(req *llm.Request) bool {
	return !strings.Contains(req.System, rootMark) && turnMessage(req).From == as.UserID
}

func delivered(req *llm.Request) bool {
	n := len(req.Messages)
	return n > 0 && req.Messages[n-1].Role == llm.RoleUser
}

func fromUser(req *llm.Request) bool { return delivered(req) && turnMessage(req).From == as.UserID }

func fromRole(role string) func(*llm.Request) bool {
	return func(req *llm.Request) bool { return delivered(req) && turnMessage(req).FromRole == role }
}

func deliveredType(t as.MessageType) func(*llm.Request) bool {
	return func(req *llm.Request) bool { return delivered(req) && turnMessage(req).Type == string(t) }
}

// result is a decoded tool result.
type result struct {
	raw    json.RawMessage
	fields map[string]any
}

func (r result) str(name string) string {
	s, _ := r.fields[name].(string)
	return s
}

func decodeResult(content string) result {
	r := result{raw: json.RawMessage(content)}
	json.Unmarshal(r.raw, &r.fields)
	return r
}

// lastResult decodes the tool result that is the request's last message.
func lastResult(req *llm.Request) (result, error) {
	n := len(req.Messages)
	if n == 0 || req.Messages[n-1].Role != llm.RoleTool {
		return result{}, errors.New("demo: the last message is not a tool result")
	}
	return decodeResult(req.Messages[n-1].Content), nil
}

func lastToolFailed(req *llm.Request) bool {
	n := len(req.Messages)
	if n == 0 || req.Messages[n-1].Role != llm.RoleTool {
		return false
	}
	_, failed := decodeResult(req.Messages[n-1].Content).fields["error"]
	return failed
}

// results returns the results of the calls to tool in the current turn,
// oldest first.
func results(req *llm.Request, tool string) []result {
	names := map[string]string{}
	var out []result
	for _, msg := range req.Messages[max(turnStart(req.Messages), 0):] {
		switch msg.Role {
		case llm.RoleAssistant:
			for _, c := range msg.ToolCalls {
				names[c.ID] = c.Name
			}
		case llm.RoleTool:
			if names[msg.ToolCallID] == tool {
				out = append(out, decodeResult(msg.Content))
			}
		}
	}
	return out
}

// roleNamed returns the id of the role named name that create_role returned
// this turn, or "".
func roleNamed(req *llm.Request, name string) string {
	for _, r := range results(req, "create_role") {
		if r.str("name") == name {
			return r.str("roleId")
		}
	}
	return ""
}

// spawnedOn returns the id of the agent spawn_agent made on role this turn,
// or "".
func spawnedOn(req *llm.Request, role string) string {
	for _, r := range results(req, "spawn_agent") {
		if r.str("roleId") == role {
			return r.str("agentId")
		}
	}
	return ""
}

// briefSection returns the agent's Task Brief as its system prompt shows it.
func briefSection(system string) string {
	_, brief, _ := strings.Cut(system, "## 任务委托书\n")
	brief, _, _ = strings.Cut(brief, "\n## ")
	return brief
}

// briefField returns a one-line field of the agent's brief.
func briefField(system, name string) string {
	for line := range strings.SplitSeq(briefSection(system), "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return v
		}
	}
	return ""
}

// briefList returns a list field of the agent's brief: nil when it is
// absent, empty when the brief says "(none)".
func briefList(system, name string) []string {
	var out []string
	in := false
	for line := range strings.SplitSeq(briefSection(system), "\n") {
		switch {
		case line == name+":":
			in, out = true, []string{}
		case !in:
		case strings.HasPrefix(line, "  - "):
			out = append(out, strings.TrimPrefix(line, "  - "))
		case line == "  (none)":
		default:
			return out
		}
	}
	return out
}

// ownConstraints returns the constraints of the agent's own brief, which it
// passes down word for word.
func ownConstraints(req *llm.Request) ([]string, error) {
	c := briefList(req.System, "constraints")
	if c == nil {
		return nil, errors.New("demo: the system prompt shows no constraints")
	}
	return c, nil
}

// ---- shared by the examples ----

// ModelFlag registers the -real flag on fs and returns the function that,
// once fs is parsed, gives the model an example runs on and whether it is a
// real one.
//
// The model is real, built by openai.New from the environment (see package
// llm/openai), when -real is given, or when -real is not given and
// OPENAI_API_KEY or OPENAI_BASE_URL is set; otherwise, and with -real=false,
// it is a fresh [Model].
func ModelFlag(fs *flag.FlagSet) func() (model llm.Model, isReal bool, err error) {
	realFlag := fs.Bool("real", false, "run on a real model through llm/openai (the default when "+
		openai.EnvAPIKey+" or "+openai.EnvBaseURL+" is set; -real=false forces the offline demo model)")
	return func() (llm.Model, bool, error) {
		isReal := os.Getenv(openai.EnvAPIKey) != "" || os.Getenv(openai.EnvBaseURL) != ""
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "real" {
				isReal = *realFlag
			}
		})
		if !isReal {
			return Model(), false, nil
		}
		m, err := openai.New(openai.Config{})
		if err != nil {
			return nil, true, err
		}
		return m, true, nil
	}
}

// WriteOrg writes the organisation of s to w as a tree under root: each
// agent with its role name, and the task of each of root's children.
func WriteOrg(w io.Writer, s *as.Society) error {
	kids := map[string][]as.Agent{}
	for _, a := range s.Agents() {
		kids[a.ParentID] = append(kids[a.ParentID], a)
	}
	var b strings.Builder
	b.WriteString(as.RootID + "\n")
	var walk func(id, indent string)
	walk = func(id, indent string) {
		for i, a := range kids[id] {
			branch, next := "├─ ", "│  "
			if i == len(kids[id])-1 {
				branch, next = "└─ ", "   "
			}
			role, _ := s.Role(a.RoleID)
			fmt.Fprintf(&b, "%s%s%s (%s)", indent, branch, a.ID, role.Name)
			if id == as.RootID && a.TaskID != "" {
				b.WriteString(" " + a.TaskID)
			}
			b.WriteString("\n")
			walk(a.ID, indent+next)
		}
	}
	walk(as.RootID, "")
	_, err := io.WriteString(w, b.String())
	return err
}
