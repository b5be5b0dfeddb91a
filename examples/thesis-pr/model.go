package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	as "agentsociety"
	"agentsociety/internal/script"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// Requirement is what the user asks for: a PR on the thesis, with the
// constraints of seed 004's thesis_modification template and the team of
// its §1.
const Requirement = `请为我的论文开一个修改 PR：把第 2.3 节对“Z 世代”的界定改为有文献支持的表述（依据 Reference/Cited/Schroth_2019.md），核对后归档 PR 文件。
约束：
- 所有修改必须有文献支持
- 不直接修改 Draft.md，通过 Archivist 执行
- 遵循 GB/T 7714-2015 引用格式
- 使用 [OPEN] 标记未解决问题
团队：负责人岗位名为 Academic Partner，由它创建 Literature Agent、PR Manager、Archivist 三个岗位并分派任务。`

// The role prompts. The scripted model plays them; a real model reads them.
const (
	academicPartnerPrompt = "你是 Academic Partner：用户的论文修改伙伴，对一个 PR 从头负责到尾。" +
		"用 create_pr 建 PR；用 state_set（scope=project）写入 pr_id、pr_status、modification_spec（original_text、target_text、acceptance_criteria、required_citations）和 10 步 checklist；" +
		"用 create_role 创建 Literature Agent、PR Manager、Archivist 三个岗位（岗位名一字不差：工具按岗位名分配）并 spawn_agent；" +
		"用 delegate_task 把文献阅读委派给 Literature Agent，拿到笔记后补全 modification_spec 的 required_citations，再把合并验证委派给 PR Manager。" +
		"委派的结果以 collaboration_response 到达：completed 为完成；error 为对方 fail_task 回推或超时，这时把问题以 [OPEN] 写入 project 状态 open_issues、把 pr_status 置为 blocked，立即 send_message 告知 user，再请 Archivist 归档 PR 文件。" +
		"Archivist 汇报工件引用后，把工件引用和待用户处理的 [OPEN] 事项一并 send_message 给 user。"
	literatureAgentPrompt = "你是 Literature Agent：收到委派（collaboration_request）后，用 state_get（scope=project）读 modification_spec，" +
		"用 search_in_literature / read_literature 阅读文献，阅读进度用 state_set（scope=private）记在 reading_progress，" +
		"再用 complete_task 交回结构化笔记：reading_notes（core_arguments、quotable_passages）、suggested_citation（GB/T 7714-2015）、critical_points。找不到文献支持时用 fail_task 说明。"
	prManagerPrompt = "你是 PR Manager：收到合并验证委派后，用 state_get 读 project 的 modification_spec 与 checklist，先 validate_spec，再用 diff_draft 在 Draft.md 中定位原文；" +
		"把 checklist 的执行结果用 state_set（scope=project）写回，验证笔记记在 private 的 validation_notes。" +
		"全部通过用 complete_task（status: verified）；规格不完整、原文定位不到或有冲突时用 fail_task 回推：error_message 以 [OPEN] 开头，details 写 type=ESCALATION、reason、required_action、blocked_items。你不修改 Draft.md。"
	archivistPrompt = "你是 Archivist：唯一执行文件操作的岗位。收到归档请求后，用 state_get 读 project 的 pr_id、pr_status、modification_spec、checklist、open_issues，" +
		"用 create_file 写出 PR/<pr_id>.md，用 sync_index 更新 _CONTEXT.md，再用 put_artifact 保存同一内容（media_type text/markdown），最后用 status_report 把工件引用汇报给父级。"
)

// What the default prompts show of each agent: root's prompt opens with
// root.txt, and every other agent's runtime facts name its role (see
// [script.RoleMark]).
const rootMark = "你是 root"

var (
	partnerMark    = script.RoleMark(roleAcademicPartner)
	literatureMark = script.RoleMark(roleLiteratureAgent)
	managerMark    = script.RoleMark(rolePRManager)
	archivistMark  = script.RoleMark(roleArchivist)
)

// The Academic Partner's first reading of the change: a paraphrase of the
// draft from memory, so original_text is not the draft's wording. The PR
// Manager finds that out and escalates.
const (
	specOriginal = "Z 世代是指 1995 年以后出生的人。"
	specTarget   = "Z 世代指 1997 年至 2012 年间出生、在智能手机与移动互联网环境中成长的一代人[12]。"
)

// checklistSteps are the ten steps of seed 004's merge checklist.
var checklistSteps = []string{
	"1_read_pr", "2_read_original", "3_check_citations", "4_check_format", "5_check_consistency",
	"6_prepare_diff", "7_delegate_archivist", "8_verify_result", "9_sync_index", "10_update_status",
}

// Model returns a new scripted model that plays seed 004's flow.
//
// The script decides every step from the request alone, as a real model
// would: which agent is asking (the role line of its system prompt), the
// message that opened its turn, its brief (the task_assignment that opened
// its history), and the tool results that came back. It never assumes an
// id: the PR, roles, agents, tasks and artifacts are named by what the
// tools returned, by the source lines and payloads of delivered messages,
// and by the contacts and children in the system prompt.
//
// Every agent below root starts on its brief: the Academic Partner goes to
// work on it; the team members, whose work comes by delegation, end that
// first turn waiting. A turn that ends by sending (the spawn of the
// Academic Partner, a request to the Archivist, a report) ends with
// end_turn; one that ends with a delegation or a settled task ends with a
// thought. So the society's
// validation (briefs, payloads, request ids, responders, state scopes, the
// tools each role may call) runs as it would for a real model, and a
// mistake in it stops the flow.
func Model() *llmtest.Model {
	m := llmtest.New(
		llmtest.Rule{Name: "a tool failed", When: script.LastToolFailed, Reply: script.ToolFailed},

		// root: one Academic Partner for the requirement, briefed with it.
		llmtest.Rule{Name: "root: spawn the lead", SystemContains: rootMark, AfterTool: "create_role", Reply: rootSpawn},
		llmtest.Rule{Name: "root: a requirement", SystemContains: rootMark, When: script.FromUser, Reply: rootCreateRole},

		// Academic Partner, turn 1: its brief. Open the PR, write the
		// project state, build the team, delegate the literature review.
		llmtest.Rule{Name: "partner: requirement", SystemContains: partnerMark, When: all(script.Delivered, partnerTurn("requirement")), Reply: partnerCreatePR},
		llmtest.Rule{Name: "partner: PR created", SystemContains: partnerMark, AfterTool: "create_pr", Reply: partnerWriteState},
		llmtest.Rule{Name: "partner: state written", SystemContains: partnerMark, AfterTool: "state_set", When: partnerTurn("requirement"), Reply: partnerCreateRoles},
		llmtest.Rule{Name: "partner: role created", SystemContains: partnerMark, AfterTool: "create_role", Reply: partnerRoleCreated},
		llmtest.Rule{Name: "partner: spawned", SystemContains: partnerMark, AfterTool: "spawn_agent", Reply: partnerSpawned},
		llmtest.Rule{Name: "partner: review delegated", SystemContains: partnerMark, AfterTool: "delegate_task", When: partnerTurn("requirement"), Reply: partnerDelegated},

		// Turn 2: the reading notes. Complete the spec, delegate the merge.
		llmtest.Rule{Name: "partner: notes", SystemContains: partnerMark, When: all(script.Delivered, partnerTurn("notes")), Response: script.Call("state_get", map[string]string{"key": "modification_spec", "scope": "project"})},
		llmtest.Rule{Name: "partner: spec read", SystemContains: partnerMark, AfterTool: "state_get", When: partnerTurn("notes"), Reply: partnerCompleteSpec},
		llmtest.Rule{Name: "partner: spec completed", SystemContains: partnerMark, AfterTool: "state_set", When: partnerTurn("notes"), Reply: partnerDelegateMerge},
		llmtest.Rule{Name: "partner: merge delegated", SystemContains: partnerMark, AfterTool: "delegate_task", When: partnerTurn("notes"), Reply: partnerDelegated},

		// Turn 3: the merge failed. Record the open issue, escalate to
		// user, have the Archivist file the blocked PR.
		llmtest.Rule{Name: "partner: escalation", SystemContains: partnerMark, When: all(script.Delivered, partnerTurn("escalation")), Response: script.Call("state_get", map[string]string{"key": "pr_id", "scope": "project"})},
		llmtest.Rule{Name: "partner: PR id read", SystemContains: partnerMark, AfterTool: "state_get", When: partnerTurn("escalation"), Reply: partnerRecordIssue},
		llmtest.Rule{Name: "partner: issue recorded", SystemContains: partnerMark, AfterTool: "state_set", When: partnerTurn("escalation"), Reply: partnerEscalate},
		llmtest.Rule{Name: "partner: escalated", SystemContains: partnerMark, AfterTool: "send_message", When: all(partnerTurn("escalation"), sentTo(as.UserID)), Reply: partnerAskArchivist},

		// Turn 4: the Archivist's report. The final report to user.
		llmtest.Rule{Name: "partner: archived", SystemContains: partnerMark, When: all(script.Delivered, partnerTurn("archived")), Response: gets("pr_id", "modification_spec", "open_issues")},
		llmtest.Rule{Name: "partner: state read for the report", SystemContains: partnerMark, AfterTool: "state_get", When: partnerTurn("archived"), Reply: partnerReport},

		// The team members: their work comes by delegation, not with the
		// brief.
		llmtest.Rule{Name: "member: briefed", When: script.DeliveredType(as.TaskAssignment), Response: llmtest.Say("委托书已收到；等待 " + roleAcademicPartner + " 派活。")},

		// Literature Agent: read the spec, search, note progress, complete.
		llmtest.Rule{Name: "literature: delegated", SystemContains: literatureMark, When: script.DeliveredType(as.CollaborationRequest), Response: script.Call("state_get", map[string]string{"key": "modification_spec", "scope": "project"})},
		llmtest.Rule{Name: "literature: spec read", SystemContains: literatureMark, AfterTool: "state_get", Reply: literatureSearch},
		llmtest.Rule{Name: "literature: searched", SystemContains: literatureMark, AfterTool: "search_in_literature", Reply: literatureNoteProgress},
		llmtest.Rule{Name: "literature: progress noted", SystemContains: literatureMark, AfterTool: "state_set", Reply: literatureComplete},
		llmtest.Rule{Name: "literature: completed", SystemContains: literatureMark, AfterTool: "complete_task", Response: llmtest.Say("阅读笔记已交回委托人。")},

		// PR Manager: validate, locate, record the checklist, complete or fail.
		llmtest.Rule{Name: "manager: delegated", SystemContains: managerMark, When: script.DeliveredType(as.CollaborationRequest), Response: gets("modification_spec", "checklist")},
		llmtest.Rule{Name: "manager: state read", SystemContains: managerMark, AfterTool: "state_get", Reply: managerValidate},
		llmtest.Rule{Name: "manager: validated", SystemContains: managerMark, AfterTool: "validate_spec", Reply: managerDiffOrRecord},
		llmtest.Rule{Name: "manager: diffed", SystemContains: managerMark, AfterTool: "diff_draft", Reply: managerRecord},
		llmtest.Rule{Name: "manager: recorded", SystemContains: managerMark, AfterTool: "state_set", Reply: managerSettle},
		llmtest.Rule{Name: "manager: completed", SystemContains: managerMark, AfterTool: "complete_task", Response: llmtest.Say("验证通过，已交回委托人。")},
		llmtest.Rule{Name: "manager: failed", SystemContains: managerMark, AfterTool: "fail_task", Response: llmtest.Say("无法执行修改，已用 fail_task 回推给委托人。")},

		// Archivist: read the state, write the PR file, index it, store it,
		// report the reference.
		llmtest.Rule{Name: "archivist: asked", SystemContains: archivistMark, When: script.FromRole(roleAcademicPartner), Response: gets("pr_id", "pr_status", "modification_spec", "checklist", "open_issues")},
		llmtest.Rule{Name: "archivist: state read", SystemContains: archivistMark, AfterTool: "state_get", Reply: archivistCreateFile},
		llmtest.Rule{Name: "archivist: file created", SystemContains: archivistMark, AfterTool: "create_file", Reply: archivistSyncIndex},
		llmtest.Rule{Name: "archivist: index synced", SystemContains: archivistMark, AfterTool: "sync_index", Reply: archivistPut},
		llmtest.Rule{Name: "archivist: stored", SystemContains: archivistMark, AfterTool: "put_artifact", Reply: archivistReport},
	)
	m.Fallback = script.Fallback
	return m
}

// ---- root ----

func rootCreateRole(req *llm.Request) (*llm.Response, error) {
	return script.Call("create_role", map[string]any{
		"name":       roleAcademicPartner,
		"rolePrompt": academicPartnerPrompt,
		"interface_spec": as.InterfaceSpec{
			Services:     "与用户对话，把论文修改请求变成 PR，组织文献、验证、归档并汇报",
			InputFormat:  "用户的修改请求（自然语言）",
			OutputFormat: "send_message 给 user：PR 文件工件引用与待处理的 [OPEN] 事项",
		},
	}), nil
}

func rootSpawn(req *llm.Request) (*llm.Response, error) {
	role, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	text := script.TurnMessage(req).Text
	first, _, _ := strings.Cut(text, "\n")
	// The spawn hands the Academic Partner its brief, which carries the
	// requirement: nothing is left for root to do.
	return script.Call("spawn_agent", map[string]any{
		"roleId": role.Str("roleId"),
		"taskBrief": as.TaskBrief{
			Objective:          "负责这个论文修改 PR：" + first,
			Constraints:        listAfter(text, "约束："),
			Inputs:             "用户需求原文：" + text,
			Outputs:            "PR 文件的工件引用 artifact:<id> 与最终报告，send_message 给 user；无法解决的问题以 [OPEN] 升级给 user",
			CompletionCriteria: "修改有文献支持并通过合并验证，或者阻塞问题已升级给 user；PR 文件已归档",
			Priority:           "high",
		},
		"end_turn": true,
	}), nil
}

// ---- Academic Partner ----

// partnerTurn reports whether the Academic Partner's current turn was
// opened by a message of the given kind.
func partnerTurn(kind string) func(*llm.Request) bool {
	return func(req *llm.Request) bool { return partnerKind(script.TurnMessage(req)) == kind }
}

// partnerKind tells what a message to the Academic Partner is: its brief
// from root, which carries the requirement, the outcome of a delegation (completed: notes;
// error, from fail_task or a timeout: escalation), or the Archivist's report.
func partnerKind(m script.Message) string {
	switch {
	case m.FromRole == as.RootID && m.Type == string(as.TaskAssignment):
		return "requirement"
	case m.Type == string(as.CollaborationResponse) && m.Payload["status"] == string(as.StatusCompleted):
		return "notes"
	case m.Type == string(as.CollaborationResponse):
		return "escalation"
	case m.Type == string(as.StatusReport) && m.Payload["status"] == string(as.StatusCompleted) && script.RefIn(m.Text) != "":
		return "archived"
	}
	return ""
}

func partnerCreatePR(req *llm.Request) (*llm.Response, error) {
	return script.Call("create_pr", map[string]string{
		"title":  "2.3 节：Z 世代的界定改为有文献支持的表述",
		"scope":  "第 2.3 节 研究对象界定",
		"reason": "现有界定没有文献支持；用户要求依据 Schroth (2019) 修改",
	}), nil
}

func partnerWriteState(req *llm.Request) (*llm.Response, error) {
	pr, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	checklist := map[string]string{}
	for _, s := range checklistSteps {
		checklist[s] = "pending"
	}
	return calls(
		stateSet("pr_id", pr.Str("pr_id"), "project"),
		stateSet("pr_status", pr.Str("status"), "project"),
		stateSet("modification_spec", spec{
			PRID:               pr.Str("pr_id"),
			File:               draftPath,
			Section:            "2.3 研究对象界定",
			OriginalText:       specOriginal,
			TargetText:         specTarget,
			AcceptanceCriteria: []string{"新表述有文献支持", "引用符合 GB/T 7714-2015", "与 2.1 节研究框架一致"},
			RequiredCitations:  []string{},
			Literature:         literaturePath,
		}, "project"),
		stateSet("checklist", checklist, "project"),
	), nil
}

// spec is the modification spec of seed 004 §3.1, as the Academic Partner
// keeps it in the project state.
type spec struct {
	PRID               string    `json:"pr_id"`
	File               string    `json:"file"`
	Section            string    `json:"section"`
	OriginalText       string    `json:"original_text"`
	TargetText         string    `json:"target_text"`
	AcceptanceCriteria []string  `json:"acceptance_criteria"`
	RequiredCitations  []string  `json:"required_citations"`
	Literature         string    `json:"literature"`
	Evidence           []section `json:"evidence,omitempty"`
}

// team is the Academic Partner's team: each role with what it is asked to
// do, in the order the roles are created and their agents spawned.
var team = []struct {
	name, prompt string
	spec         as.InterfaceSpec
	brief        as.TaskBrief
}{
	{roleLiteratureAgent, literatureAgentPrompt,
		as.InterfaceSpec{Services: "深度阅读文献，输出结构化阅读笔记", InputFormat: "delegate_task：payload 含 literature_path、focus_points、research_framework", OutputFormat: "complete_task：reading_notes、suggested_citation、critical_points"},
		as.TaskBrief{Objective: "按委派深度阅读文献，输出结构化阅读笔记", Inputs: "delegate_task 的委派与 project 状态 modification_spec",
			Outputs: "complete_task：reading_notes（core_arguments、quotable_passages）与 GB/T 7714-2015 格式的 suggested_citation", CompletionCriteria: "每个要点都有文献段落支持"}},
	{rolePRManager, prManagerPrompt,
		as.InterfaceSpec{Services: "验证修改规格并执行 10 步合并 checklist", InputFormat: "delegate_task：payload 含 pr_id；规格在 project 状态 modification_spec", OutputFormat: "complete_task（status: verified）或 fail_task（[OPEN] + details）"},
		as.TaskBrief{Objective: "验证 modification_spec 并执行合并 checklist", Inputs: "delegate_task 的委派；project 状态 modification_spec、checklist",
			Outputs: "checklist 写回 project 状态；complete_task（verified）或 fail_task 回推", CompletionCriteria: "checklist 每一步都有结论；不能通过时已回推"}},
	{roleArchivist, archivistPrompt,
		as.InterfaceSpec{Services: "执行文件操作、同步索引、归档 PR 文件", InputFormat: "归档请求（消息）；内容取自 project 状态", OutputFormat: "status_report：PR 文件的工件引用"},
		as.TaskBrief{Objective: "执行文件操作并归档 PR 文件", Inputs: "Academic Partner 的归档请求；project 状态",
			Outputs: "PR/<pr_id>.md、_CONTEXT.md 条目、PR 文件的工件引用（status_report 汇报）", CompletionCriteria: "文件、索引与工件内容一致"}},
}

func partnerCreateRoles(req *llm.Request) (*llm.Response, error) {
	return createRole(0), nil
}

func createRole(i int) *llm.Response {
	return script.Call("create_role", map[string]any{"name": team[i].name, "rolePrompt": team[i].prompt, "interface_spec": team[i].spec})
}

// teamIndex returns the position in team of the role named name, or -1.
func teamIndex(name string) int {
	for i, t := range team {
		if t.name == name {
			return i
		}
	}
	return -1
}

func partnerRoleCreated(req *llm.Request) (*llm.Response, error) {
	role, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	i := teamIndex(role.Str("name"))
	switch {
	case i < 0:
		return nil, fmt.Errorf("partner: unexpected role %q", role.Str("name"))
	case i+1 < len(team):
		return createRole(i + 1), nil
	}
	return spawn(req, 0)
}

// spawn spawns the agent of team[i] on the role created this turn, passing
// the Academic Partner's own constraints down word for word.
func spawn(req *llm.Request, i int) (*llm.Response, error) {
	roleID := script.RoleNamed(req, team[i].name)
	constraints := script.BriefList(req, "constraints")
	if roleID == "" || constraints == nil {
		return nil, fmt.Errorf("partner: role %q %q, constraints %q", team[i].name, roleID, constraints)
	}
	brief := team[i].brief
	brief.Constraints = constraints
	return script.Call("spawn_agent", map[string]any{"roleId": roleID, "taskBrief": brief}), nil
}

func partnerSpawned(req *llm.Request) (*llm.Response, error) {
	child, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	for i, t := range team {
		if script.RoleNamed(req, t.name) != child.Str("roleId") {
			continue
		}
		if i+1 < len(team) {
			return spawn(req, i+1)
		}
		// The team is complete: delegate the literature review.
		reader := script.SpawnedOn(req, script.RoleNamed(req, roleLiteratureAgent))
		prs := script.Results(req, "create_pr")
		if reader == "" || len(prs) == 0 {
			return nil, errors.New("partner: no Literature Agent spawned or no PR created this turn")
		}
		prID := prs[0].Str("pr_id")
		return script.Call("delegate_task", map[string]any{
			"assignee":    reader,
			"description": "阅读文献并输出结构化笔记",
			"payload": map[string]any{
				"task_type":       "deep_read",
				"pr_id":           prID,
				"literature_path": literaturePath,
				"focus_points":    []string{"Gen Z 的出生年份界定", "与 Millennials 的区别"},
				"research_framework": map[string]string{
					"RQ1": "Z 世代的职场价值观", "RQ2": "其对组织认同的影响", "RQ3": "对管理实践的启示",
				},
				"output_format": "structured_notes",
			},
			"timeout_seconds": 600,
		}), nil
	}
	return nil, fmt.Errorf("partner: spawned %s on an unexpected role %q", child.Str("agentId"), child.Str("roleId"))
}

func partnerDelegated(req *llm.Request) (*llm.Response, error) {
	d, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	return llmtest.Say("已委派任务 " + d.Str("task_id") + "（" + d.Str("status") + "），等待结果。"), nil
}

// notes is the result the Literature Agent's complete_task carries.
type notes struct {
	Status       string `json:"status"`
	ReadingNotes struct {
		CoreArguments    []string  `json:"core_arguments"`
		QuotablePassages []section `json:"quotable_passages"`
	} `json:"reading_notes"`
	SuggestedCitation string   `json:"suggested_citation"`
	CriticalPoints    []string `json:"critical_points"`
}

func partnerCompleteSpec(req *llm.Request) (*llm.Response, error) {
	var s spec
	if err := stateValue(req, "modification_spec", &s); err != nil {
		return nil, err
	}
	var n notes
	if err := remarshal(script.TurnMessage(req).Payload["result_data"], &n); err != nil || n.SuggestedCitation == "" {
		return nil, fmt.Errorf("partner: the reading notes carry no citation (%v)", err)
	}
	s.RequiredCitations = []string{n.SuggestedCitation}
	s.Evidence = n.ReadingNotes.QuotablePassages
	return calls(stateSet("modification_spec", s, "project")), nil
}

func partnerDelegateMerge(req *llm.Request) (*llm.Response, error) {
	manager := script.ContactWithRole(req.System, rolePRManager)
	if manager == "" {
		return nil, errors.New("partner: no PR Manager among the contacts")
	}
	var s spec
	if err := stateValue(req, "modification_spec", &s); err != nil {
		return nil, err
	}
	return script.Call("delegate_task", map[string]any{
		"assignee":        manager,
		"description":     "验证修改规格并执行合并 checklist",
		"payload":         map[string]any{"task_type": "merge_verification", "pr_id": s.PRID, "spec_key": "modification_spec", "checklist_key": "checklist"},
		"timeout_seconds": 300,
	}), nil
}

// issue is an open issue as the Academic Partner records it.
type issue struct {
	Type        string          `json:"type"`
	From        string          `json:"from"`
	TaskID      string          `json:"task_id"`
	Description string          `json:"description"`
	Details     json.RawMessage `json:"details,omitempty"`
}

func partnerRecordIssue(req *llm.Request) (*llm.Response, error) {
	m := script.TurnMessage(req)
	msg, _ := m.Payload["error_message"].(string)
	id, _ := m.Payload["request_id"].(string)
	details, _ := json.Marshal(m.Payload["result_data"])
	if msg == "" {
		return nil, errors.New("partner: the failure has no error_message")
	}
	is := issue{Type: "OPEN", From: m.FromRole + "（" + m.From + "）", TaskID: id, Description: msg}
	if string(details) != "null" {
		is.Details = details
	}
	return calls(
		stateSet("open_issues", []issue{is}, "project"),
		stateSet("pr_status", "blocked", "project"),
	), nil
}

// escalation is the details of a fail_task as seed 004 §3.3 writes them.
type escalation struct {
	Type           string   `json:"type"`
	Reason         string   `json:"reason"`
	RequiredAction string   `json:"required_action"`
	BlockedItems   []string `json:"blocked_items"`
	ClosestMatch   *struct {
		Line int    `json:"line"`
		Text string `json:"text"`
	} `json:"closest_match"`
}

func describe(is issue) string {
	var e escalation
	json.Unmarshal(is.Details, &e)
	var b strings.Builder
	b.WriteString(is.Description)
	if e.Reason != "" {
		b.WriteString("\n原因：" + e.Reason)
	}
	if e.RequiredAction != "" {
		b.WriteString("\n需要：" + e.RequiredAction)
	}
	if len(e.BlockedItems) > 0 {
		b.WriteString("\n受阻的 checklist 项：" + strings.Join(e.BlockedItems, "、"))
	}
	if c := e.ClosestMatch; c != nil {
		b.WriteString(fmt.Sprintf("\n%s 中最接近的原文（第 %d 行）：「%s」", draftPath, c.Line, c.Text))
	}
	return b.String()
}

func partnerEscalate(req *llm.Request) (*llm.Response, error) {
	var prID string
	if err := stateValue(req, "pr_id", &prID); err != nil {
		return nil, err
	}
	m := script.TurnMessage(req)
	msg, _ := m.Payload["error_message"].(string)
	details, _ := json.Marshal(m.Payload["result_data"])
	text := "【升级】" + prID + " 的合并验证被 " + m.FromRole + "（" + m.From + "）回推：\n" +
		describe(issue{Description: msg, Details: details}) +
		"\n请确认 2.3 节要修改的是哪一句原文；确认后我会更新 modification_spec 并重新提交合并验证。PR 文件正在归档，稍后发给您。"
	return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": text}}), nil
}

func partnerAskArchivist(req *llm.Request) (*llm.Response, error) {
	archivist := script.ContactWithRole(req.System, roleArchivist)
	if archivist == "" {
		return nil, errors.New("partner: no Archivist among the contacts")
	}
	var prID string
	if err := stateValue(req, "pr_id", &prID); err != nil {
		return nil, err
	}
	return script.Call("send_message", map[string]any{"to": archivist, "payload": map[string]string{
		"text": "请归档 " + prID + " 的 PR 文件：内容取自 project 状态（pr_id、pr_status、modification_spec、checklist、open_issues），" +
			"写入 PR/" + prID + ".md 并同步 _CONTEXT.md，再用 put_artifact 保存，完成后用 status_report 把工件引用发给我。",
	}, "end_turn": true}), nil
}

func partnerReport(req *llm.Request) (*llm.Response, error) {
	m := script.TurnMessage(req)
	ref := script.RefIn(m.Text)
	var prID string
	var s spec
	var issues []issue
	for key, v := range map[string]any{"pr_id": &prID, "modification_spec": &s, "open_issues": &issues} {
		if err := stateValue(req, key, v); err != nil {
			return nil, err
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s 的 PR 文件已由 Archivist（%s）归档：%s（PR/%s.md）。\n", prID, m.From, ref, prID)
	fmt.Fprintf(&b, "- 文献阅读：已完成，修改依据 %s\n", strings.Join(s.RequiredCitations, "；"))
	b.WriteString("- 合并验证：被回推，PR 状态 blocked。待您处理的 [OPEN] 事项：\n")
	for _, is := range issues {
		b.WriteString("  " + strings.ReplaceAll(describe(is), "\n", "\n  ") + "\n")
	}
	b.WriteString("Draft.md 未作改动。")
	return script.Call("send_message", map[string]any{"to": as.UserID, "payload": map[string]string{"text": b.String()}, "end_turn": true}), nil
}

// ---- Literature Agent ----

// literatureQuery is what the Literature Agent searches for: the two focus
// points of the delegation, the birth years and the comparison.
const literatureQuery = "出生 Millennials"

func literatureSearch(req *llm.Request) (*llm.Response, error) {
	ctx, _ := script.TurnMessage(req).Payload["context"].(map[string]any)
	path, _ := ctx["literature_path"].(string)
	if path == "" {
		var s spec
		if err := stateValue(req, "modification_spec", &s); err != nil {
			return nil, err
		}
		path = s.Literature
	}
	return script.Call("search_in_literature", map[string]string{"path": path, "query": literatureQuery}), nil
}

func literatureNoteProgress(req *llm.Request) (*llm.Response, error) {
	found, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	var r struct {
		Path    string    `json:"path"`
		Count   int       `json:"count"`
		Matches []section `json:"matches"`
	}
	json.Unmarshal(found.Raw, &r)
	sections := []string{}
	for _, p := range r.Matches {
		sections = append(sections, p.Section)
	}
	return calls(stateSet("reading_progress", map[string]any{
		r.Path: map[string]any{"status": "read", "query": literatureQuery, "passages": r.Count, "sections": sections},
	}, "private")), nil
}

func literatureComplete(req *llm.Request) (*llm.Response, error) {
	found := script.Results(req, "search_in_literature")
	if len(found) == 0 {
		return nil, errors.New("literature: no search this turn")
	}
	var r struct {
		Title   string    `json:"title"`
		Matches []section `json:"matches"`
	}
	json.Unmarshal(found[0].Raw, &r)
	id, _ := script.TurnMessage(req).Payload["request_id"].(string)
	if len(r.Matches) == 0 {
		return script.Call("fail_task", map[string]any{"task_id": id, "error_message": "[OPEN] 文献中找不到支持", "details": map[string]string{"query": literatureQuery}}), nil
	}
	var s spec
	if err := stateValue(req, "modification_spec", &s); err != nil {
		return nil, err
	}
	var n notes
	n.Status = "success"
	n.SuggestedCitation = r.Title
	n.ReadingNotes.QuotablePassages = r.Matches
	n.CriticalPoints = []string{}
	for _, p := range r.Matches {
		n.ReadingNotes.CoreArguments = append(n.ReadingNotes.CoreArguments, p.Section+"："+p.Text)
		if strings.Contains(p.Text, "1997") && strings.Contains(s.TargetText, "1997") {
			n.CriticalPoints = append(n.CriticalPoints, "modification_spec.target_text 的出生年份区间有文献支持（"+p.Section+"）")
		}
	}
	return script.Call("complete_task", map[string]any{"task_id": id, "result": n}), nil
}

// ---- PR Manager ----

func managerValidate(req *llm.Request) (*llm.Response, error) {
	var s json.RawMessage
	if err := stateValue(req, "modification_spec", &s); err != nil {
		return nil, err
	}
	return script.Call("validate_spec", map[string]any{"spec": s}), nil
}

func managerDiffOrRecord(req *llm.Request) (*llm.Response, error) {
	v, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	if complete, _ := v.Fields["complete"].(bool); !complete {
		return managerRecord(req)
	}
	var s spec
	if err := stateValue(req, "modification_spec", &s); err != nil {
		return nil, err
	}
	return script.Call("diff_draft", map[string]string{"file": s.File, "original_text": s.OriginalText, "target_text": s.TargetText}), nil
}

// managerVerdict is what the PR Manager found this turn: "" when the change
// can be applied, else the reason it cannot, with the details of the
// escalation.
func managerVerdict(req *llm.Request) (string, escalation) {
	v := script.Results(req, "validate_spec")
	if len(v) == 0 {
		return "规格未经验证", escalation{Type: "ESCALATION"}
	}
	if complete, _ := v[0].Fields["complete"].(bool); !complete {
		missing, _ := json.Marshal(v[0].Fields["missing_items"])
		return "规格不完整：缺少 " + string(missing), escalation{
			Type: "ESCALATION", Reason: "modification_spec 缺少必需项 " + string(missing),
			RequiredAction: "Academic Partner 需要补全修改规格", BlockedItems: []string{"1_read_pr", "3_check_citations"},
		}
	}
	d := script.Results(req, "diff_draft")
	if len(d) == 0 {
		return "原文未定位", escalation{Type: "ESCALATION"}
	}
	if ok, _ := d[0].Fields["applicable"].(bool); ok {
		return "", escalation{}
	}
	e := escalation{
		Type:           "ESCALATION",
		Reason:         "modification_spec.original_text 与 " + d[0].Str("file") + " 的原文不一致（" + d[0].Str("reason") + "），无法定位修改位置",
		RequiredAction: "Academic Partner 需要提供 Draft.md 中的精确位置与原文",
		BlockedItems:   []string{"2_read_original", "6_prepare_diff"},
	}
	remarshal(d[0].Fields["closest"], &e.ClosestMatch)
	return "规格不完整：" + d[0].Str("reason"), e
}

func managerRecord(req *llm.Request) (*llm.Response, error) {
	checklist := map[string]string{}
	if err := stateValue(req, "checklist", &checklist); err != nil {
		return nil, err
	}
	problem, esc := managerVerdict(req)
	checklist["1_read_pr"] = "pass"
	if v := script.Results(req, "validate_spec"); len(v) > 0 {
		if complete, _ := v[0].Fields["complete"].(bool); complete {
			checklist["3_check_citations"] = "pass"
			checklist["4_check_format"] = "pass"
		}
	}
	memo := map[string]any{"problem": problem}
	if d := script.Results(req, "diff_draft"); len(d) > 0 {
		memo["diff"] = d[0].Fields
		if ok, _ := d[0].Fields["applicable"].(bool); ok {
			checklist["2_read_original"] = "pass"
			checklist["6_prepare_diff"] = "pass"
		}
	}
	for _, item := range esc.BlockedItems {
		checklist[item] = "blocked"
	}
	return calls(
		stateSet("checklist", checklist, "project"),
		stateSet("validation_notes", memo, "private"),
	), nil
}

func managerSettle(req *llm.Request) (*llm.Response, error) {
	id, _ := script.TurnMessage(req).Payload["request_id"].(string)
	problem, esc := managerVerdict(req)
	if problem == "" {
		var checklist map[string]string
		if err := stateValue(req, "checklist", &checklist); err != nil {
			return nil, err
		}
		return script.Call("complete_task", map[string]any{"task_id": id, "result": map[string]any{
			"status": "verified", "checklist": checklist, "diff": script.Results(req, "diff_draft")[0].Str("diff"),
		}}), nil
	}
	return script.Call("fail_task", map[string]any{"task_id": id, "error_message": "[OPEN] " + problem, "details": esc}), nil
}

// ---- Archivist ----

// prFile writes the PR file from the project state the Archivist read.
func prFile(req *llm.Request) (prID, content string, err error) {
	var status string
	var s spec
	var checklist map[string]string
	var issues []issue
	for key, v := range map[string]any{"pr_id": &prID, "pr_status": &status, "modification_spec": &s, "checklist": &checklist, "open_issues": &issues} {
		if err := stateValue(req, key, v); err != nil {
			return "", "", err
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n- 状态：%s\n- 文件：%s\n- 章节：%s\n\n## 修改规格\n\n", prID, status, s.File, s.Section)
	fmt.Fprintf(&b, "- 原文：%s\n- 目标：%s\n- 验收标准：%s\n- 引用：\n", s.OriginalText, s.TargetText, strings.Join(s.AcceptanceCriteria, "；"))
	for _, c := range s.RequiredCitations {
		b.WriteString("  - " + c + "\n")
	}
	b.WriteString("\n## Checklist\n\n")
	for _, step := range checklistSteps {
		fmt.Fprintf(&b, "- %s：%s\n", step, checklist[step])
	}
	b.WriteString("\n## 未解决问题\n\n")
	for _, is := range issues {
		b.WriteString("- " + strings.ReplaceAll(describe(is), "\n", "\n  ") + "\n")
	}
	return prID, b.String(), nil
}

func archivistCreateFile(req *llm.Request) (*llm.Response, error) {
	prID, content, err := prFile(req)
	if err != nil {
		return nil, err
	}
	return script.Call("create_file", map[string]string{"path": "PR/" + prID + ".md", "content": content}), nil
}

func archivistSyncIndex(req *llm.Request) (*llm.Response, error) {
	created, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	var status string
	if err := stateValue(req, "pr_status", &status); err != nil {
		return nil, err
	}
	return script.Call("sync_index", map[string]any{"index_file": indexPath, "entries": []string{created.Str("path") + "（" + status + "）"}}), nil
}

func archivistPut(req *llm.Request) (*llm.Response, error) {
	prID, content, err := prFile(req)
	if err != nil {
		return nil, err
	}
	return script.Call("put_artifact", map[string]string{"name": prID + ".md", "media_type": "text/markdown", "content": content}), nil
}

func archivistReport(req *llm.Request) (*llm.Response, error) {
	put, err := script.LastResult(req)
	if err != nil {
		return nil, err
	}
	parent := script.Parent(req.System)
	files := script.Results(req, "create_file")
	if parent == "" || len(files) == 0 {
		return nil, fmt.Errorf("archivist: parent %q, %d files created", parent, len(files))
	}
	return script.Call("send_message", map[string]any{"to": parent, "message_type": as.StatusReport, "payload": map[string]string{
		"status": string(as.StatusCompleted),
		"text":   "PR 文件已归档：" + put.Str("ref") + "（" + files[0].Str("path") + "，已同步 " + indexPath + "）。",
	}, "end_turn": true}), nil
}

// ---- replies ----

// calls is a reply that calls several tools in one step.
func calls(cs ...llm.ToolCall) *llm.Response { return llmtest.Calls(cs...) }

func stateSet(key string, value any, scope string) llm.ToolCall {
	return script.ToolCall("state_set", map[string]any{"key": key, "value": value, "scope": scope})
}

// gets is a reply that reads project state keys, one call each.
func gets(keys ...string) *llm.Response {
	cs := make([]llm.ToolCall, len(keys))
	for i, k := range keys {
		cs[i] = script.ToolCall("state_get", map[string]string{"key": k, "scope": "project"})
	}
	return calls(cs...)
}

// remarshal converts a decoded JSON value into v.
func remarshal(from any, v any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// ---- reading requests ----

// listAfter returns the "- " items of text that follow the line head.
func listAfter(text, head string) []string {
	out := []string{}
	in := false
	for line := range strings.SplitSeq(text, "\n") {
		switch {
		case strings.TrimSpace(line) == head:
			in = true
		case !in:
		case strings.HasPrefix(line, "- "):
			out = append(out, strings.TrimSpace(strings.TrimPrefix(line, "- ")))
		default:
			return out
		}
	}
	return out
}

func all(preds ...func(*llm.Request) bool) func(*llm.Request) bool {
	return func(req *llm.Request) bool {
		for _, p := range preds {
			if !p(req) {
				return false
			}
		}
		return true
	}
}

// sentTo reports whether the request's last message is the result of a
// send_message to id.
func sentTo(id string) func(*llm.Request) bool {
	return func(req *llm.Request) bool {
		r, err := script.LastResult(req)
		return err == nil && r.Str("to") == id
	}
}

// stateValue decodes into v the newest value of state key this turn, read
// by state_get or written by state_set.
func stateValue(req *llm.Request, key string, v any) error {
	var found json.RawMessage
	for _, c := range script.TurnCalls(req) {
		if c.Args["key"] != key {
			continue
		}
		switch c.Name {
		case "state_get":
			if ok, _ := c.Result.Fields["found"].(bool); ok {
				found, _ = json.Marshal(c.Result.Fields["value"])
			}
		case "state_set":
			if ok, _ := c.Result.Fields["ok"].(bool); ok {
				found, _ = json.Marshal(c.Args["value"])
			}
		}
	}
	if found == nil {
		return fmt.Errorf("thesis-pr: state %q was not read this turn", key)
	}
	return json.Unmarshal(found, v)
}
