package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	as "agentsociety"
	"agentsociety/toolset"
)

// The role names of seed 004. The host tools are limited to them, so the
// lead and its team must be created under exactly these names.
const (
	roleAcademicPartner = "Academic Partner"
	roleLiteratureAgent = "Literature Agent"
	rolePRManager       = "PR Manager"
	roleArchivist       = "Archivist"
)

// The paths of the thesis project.
const (
	draftPath      = "Draft.md"
	indexPath      = "_CONTEXT.md"
	literaturePath = "Reference/Cited/Schroth_2019.md"
)

// draft is the thesis draft the PR is about. Seed 004's rule is that nobody
// edits it but the Archivist, and only with a verified change: in this run
// nobody does.
const draft = `# 第二章 文献综述与研究框架

## 2.1 研究框架
本文围绕三个研究问题展开：RQ1 Z 世代的职场价值观；RQ2 其对组织认同的影响；RQ3 对管理实践的启示。

## 2.2 代际理论
代际理论认为，成长于相同社会环境的一代人会形成相近的价值观与行为方式。

## 2.3 研究对象界定
Z 世代通常指 1995 年至 2009 年间出生的人群，他们被称为互联网原住民。
与千禧一代相比，他们更看重工作的灵活性与意义感。
`

// literature is the library the Literature Agent reads.
var literature = map[string]string{
	literaturePath: `# SCHROTH H. Are you ready for Gen Z in the workplace?[J]. California Management Review, 2019, 61(3): 5-18.

> 演示数据：以下段落是为离线示例编写的虚构摘录，不是该文献的原文，也不代表其观点。

## 1 Introduction
本文讨论的 Gen Z 指 1997 年至 2012 年间出生的一代人，他们成长于智能手机与移动互联网普及的环境中。

## 2 Gen Z vs. Millennials
与 Millennials 相比，Gen Z 更早接触移动设备，更重视经济安全与职业稳定。

## 3 Implications for managers
管理者需要为 Gen Z 提供更频繁的反馈与清晰的成长路径。
`,
}

// workspace is the world the host tools act on: the thesis files, the
// literature library and the PR registry. It lives in memory, for the
// example; a real host would put files on disk or in git.
type workspace struct {
	mu         sync.Mutex
	files      map[string]string
	literature map[string]string
	prs        map[string]*pullRequest
	nextPR     int
}

// pullRequest is a PR as the registry keeps it.
type pullRequest struct {
	ID        string `json:"pr_id"`
	Title     string `json:"title"`
	Scope     string `json:"scope"`
	Reason    string `json:"reason,omitempty"`
	Status    string `json:"status"`
	File      string `json:"file"`
	CreatedBy string `json:"created_by"`
}

func newWorkspace() *workspace {
	return &workspace{
		files:      map[string]string{draftPath: draft, indexPath: "# 上下文索引\n"},
		literature: maps.Clone(literature),
		prs:        map[string]*pullRequest{},
		nextPR:     10, // PR-0001 … PR-0009 were merged before this run
	}
}

// file returns the content of a file of the thesis project.
func (w *workspace) file(path string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.files[path]
	return s, ok
}

// pr returns a copy of a PR of the registry.
func (w *workspace) pr(id string) (pullRequest, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.prs[id]
	if p == nil {
		return pullRequest{}, false
	}
	return *p, true
}

// tools returns the host tools of seed 004 §4, each limited to the role
// that uses it, over w; then the delegation and state tools, given to the
// four roles.
func (w *workspace) tools() []as.Tool {
	tools := []as.Tool{
		{
			Name: "create_pr",
			Description: "创建一个新的论文修改 PR，返回 pr_id 与 PR 文件路径。使用时机：用户请求修改论文内容时；" +
				"不要使用：只是讨论、没有明确修改意图时。",
			Parameters: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","description":"PR 标题"},"scope":{"type":"string","description":"修改范围（哪个章节）"},"reason":{"type":"string","description":"为什么要修改"}},"required":["title","scope"]}`),
			Roles:      []string{roleAcademicPartner},
			Handler:    w.createPR,
		},
		{
			Name:        "read_literature",
			Description: "读取文献库中一篇文献的内容；给 section 时只读该章节（按标题包含匹配）。",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"文献路径"},"section":{"type":"string"}},"required":["path"]}`),
			Roles:       []string{roleLiteratureAgent},
			Handler:     w.readLiterature,
		},
		{
			Name:        "search_in_literature",
			Description: "在一篇文献中按关键词（空格分隔，任一命中即可）搜索段落，返回段落所在章节与原文。",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"query":{"type":"string"}},"required":["path","query"]}`),
			Roles:       []string{roleLiteratureAgent},
			Handler:     w.searchLiterature,
		},
		{
			Name: "validate_spec",
			Description: "验证修改规格的完整性：original_text、target_text、acceptance_criteria、required_citations（GB/T 7714-2015 格式）。" +
				"必须先调用此工具，再执行 checklist。",
			Parameters: json.RawMessage(`{"type":"object","properties":{"spec":{"type":"object","description":"修改规格对象"}},"required":["spec"]}`),
			Roles:      []string{rolePRManager},
			Handler:    validateSpec,
		},
		{
			Name: "diff_draft",
			Description: "预览修改：在文件中定位 original_text，给出替换为 target_text 的 diff；找不到或不唯一时说明原因并给出最接近的行。" +
				"只读，不修改文件（文件修改由 Archivist 执行）。",
			Parameters: json.RawMessage(`{"type":"object","properties":{"file":{"type":"string"},"original_text":{"type":"string"},"target_text":{"type":"string"}},"required":["file","original_text","target_text"]}`),
			Roles:      []string{rolePRManager},
			Handler:    w.diffDraft,
		},
		{
			Name:        "read_file",
			Description: "读取论文项目中的文件（Draft.md、_CONTEXT.md、PR/…）。",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
			Roles:       []string{rolePRManager, roleArchivist},
			Handler:     w.readFile,
		},
		{
			Name:        "create_file",
			Description: "在论文项目中创建新文件（如 PR/PR-XXXX.md）；文件已存在时拒绝。",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`),
			Roles:       []string{roleArchivist},
			Handler:     w.createFile,
		},
		{
			Name:        "sync_index",
			Description: "把条目追加到索引文件（如 _CONTEXT.md），每条一行。",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"index_file":{"type":"string"},"entries":{"type":"array","items":{"type":"string"}}},"required":["index_file","entries"]}`),
			Roles:       []string{roleArchivist},
			Handler:     w.syncIndex,
		},
	}
	team := []string{roleAcademicPartner, roleLiteratureAgent, rolePRManager, roleArchivist}
	for _, t := range append(toolset.Delegation(), toolset.State()...) {
		t.Roles = team
		tools = append(tools, t)
	}
	return tools
}

// notFound is a tool error the model can act on.
func notFound(what, path string) error {
	return &as.Error{Code: as.ErrInvalidArgument, Message: fmt.Sprintf("no %s %q", what, path)}
}

func decode(args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		return &as.Error{Code: as.ErrInvalidArgument, Message: "bad arguments: " + err.Error()}
	}
	return nil
}

func (w *workspace) createPR(_ context.Context, self *as.Actor, args json.RawMessage) (any, error) {
	var a struct{ Title, Scope, Reason string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if strings.TrimSpace(a.Title) == "" || strings.TrimSpace(a.Scope) == "" {
		return nil, &as.Error{Code: as.ErrInvalidArgument, Message: "a PR needs a title and a scope", MissingFields: []string{"title", "scope"}}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id := fmt.Sprintf("PR-%04d", w.nextPR)
	w.nextPR++
	p := &pullRequest{ID: id, Title: a.Title, Scope: a.Scope, Reason: a.Reason, Status: "draft", File: "PR/" + id + ".md", CreatedBy: self.ID()}
	w.prs[id] = p
	return *p, nil
}

// title returns the first heading of a document: for the literature, its
// reference in GB/T 7714-2015 form.
func title(doc string) string {
	line, _, _ := strings.Cut(doc, "\n")
	return strings.TrimSpace(strings.TrimLeft(line, "#"))
}

// section is a paragraph of a document with the heading it is under.
type section struct {
	Section string `json:"section"`
	Text    string `json:"text"`
}

// paragraphs splits a markdown document into its paragraphs, headings
// aside.
func paragraphs(doc string) []section {
	var out []section
	heading := ""
	for block := range strings.SplitSeq(doc, "\n\n") {
		for line := range strings.SplitSeq(strings.TrimSpace(block), "\n") {
			switch {
			case line == "":
			case strings.HasPrefix(line, "#"):
				heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
			default:
				out = append(out, section{heading, line})
			}
		}
	}
	return out
}

func (w *workspace) readLiterature(_ context.Context, _ *as.Actor, args json.RawMessage) (any, error) {
	var a struct{ Path, Section string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	w.mu.Lock()
	doc, ok := w.literature[a.Path]
	w.mu.Unlock()
	if !ok {
		return nil, notFound("literature", a.Path)
	}
	if a.Section == "" {
		return map[string]any{"path": a.Path, "title": title(doc), "content": doc}, nil
	}
	var parts []section
	for _, p := range paragraphs(doc) {
		if strings.Contains(strings.ToLower(p.Section), strings.ToLower(a.Section)) {
			parts = append(parts, p)
		}
	}
	return map[string]any{"path": a.Path, "title": title(doc), "section": a.Section, "paragraphs": parts}, nil
}

func (w *workspace) searchLiterature(_ context.Context, _ *as.Actor, args json.RawMessage) (any, error) {
	var a struct{ Path, Query string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	w.mu.Lock()
	doc, ok := w.literature[a.Path]
	w.mu.Unlock()
	if !ok {
		return nil, notFound("literature", a.Path)
	}
	terms := strings.Fields(strings.ToLower(a.Query))
	matches := []section{}
	for _, p := range paragraphs(doc) {
		text := strings.ToLower(p.Text)
		if slices.ContainsFunc(terms, func(t string) bool { return strings.Contains(text, t) }) {
			matches = append(matches, p)
		}
	}
	return map[string]any{"path": a.Path, "title": title(doc), "query": a.Query, "count": len(matches), "matches": matches}, nil
}

// gbt7714 recognises a reference in GB/T 7714-2015 form by its document
// type mark: [J] journal, [M] book, [D] thesis, [C] proceedings, [EB/OL]
// online.
var gbt7714 = regexp.MustCompile(`\[(J|M|D|C|N|R|EB/OL)\]`)

func validateSpec(_ context.Context, _ *as.Actor, args json.RawMessage) (any, error) {
	var a struct {
		Spec struct {
			OriginalText       string   `json:"original_text"`
			TargetText         string   `json:"target_text"`
			AcceptanceCriteria []string `json:"acceptance_criteria"`
			RequiredCitations  []string `json:"required_citations"`
		} `json:"spec"`
	}
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	s := a.Spec
	missing := []string{}
	if strings.TrimSpace(s.OriginalText) == "" {
		missing = append(missing, "original_text")
	}
	if strings.TrimSpace(s.TargetText) == "" {
		missing = append(missing, "target_text")
	}
	if len(s.AcceptanceCriteria) == 0 {
		missing = append(missing, "acceptance_criteria")
	}
	if len(s.RequiredCitations) == 0 {
		missing = append(missing, "required_citations")
	}
	for i, c := range s.RequiredCitations {
		if !gbt7714.MatchString(c) {
			missing = append(missing, fmt.Sprintf("required_citations[%d]: 不是 GB/T 7714-2015 格式", i))
		}
	}
	return map[string]any{"complete": len(missing) == 0, "missing_items": missing}, nil
}

func (w *workspace) diffDraft(_ context.Context, _ *as.Actor, args json.RawMessage) (any, error) {
	var a struct {
		File         string `json:"file"`
		OriginalText string `json:"original_text"`
		TargetText   string `json:"target_text"`
	}
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	doc, ok := w.file(a.File)
	if !ok {
		return nil, notFound("file", a.File)
	}
	if strings.TrimSpace(a.OriginalText) == "" {
		return nil, &as.Error{Code: as.ErrInvalidArgument, Message: "original_text is empty", MissingFields: []string{"original_text"}}
	}
	lines := strings.Split(doc, "\n")
	var hits []int
	for i, l := range lines {
		if strings.Contains(l, a.OriginalText) {
			hits = append(hits, i+1)
		}
	}
	switch len(hits) {
	case 1:
		n := hits[0]
		return map[string]any{
			"applicable": true, "file": a.File, "line": n,
			"diff": fmt.Sprintf("@@ %s:%d @@\n- %s\n+ %s", a.File, n, lines[n-1], strings.Replace(lines[n-1], a.OriginalText, a.TargetText, 1)),
		}, nil
	case 0:
		best, score := 0, 0
		for i, l := range lines {
			if s := similarity(l, a.OriginalText); s > score {
				best, score = i+1, s
			}
		}
		out := map[string]any{"applicable": false, "file": a.File, "reason": "original_text 在 " + a.File + " 中找不到"}
		if best > 0 {
			out["closest"] = map[string]any{"line": best, "text": lines[best-1]}
		}
		return out, nil
	}
	return map[string]any{"applicable": false, "file": a.File, "reason": "original_text 在 " + a.File + " 中出现多次", "lines": hits}, nil
}

// similarity counts the character pairs of b that also occur in a: enough
// to point a person at the line they probably meant.
func similarity(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	pairs := map[string]bool{}
	for i := 0; i+1 < len(ra); i++ {
		pairs[string(ra[i:i+2])] = true
	}
	n := 0
	for i := 0; i+1 < len(rb); i++ {
		if pairs[string(rb[i:i+2])] {
			n++
		}
	}
	return n
}

func (w *workspace) readFile(_ context.Context, _ *as.Actor, args json.RawMessage) (any, error) {
	var a struct{ Path string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	doc, ok := w.file(a.Path)
	if !ok {
		return nil, notFound("file", a.Path)
	}
	return map[string]any{"path": a.Path, "content": doc}, nil
}

func (w *workspace) createFile(_ context.Context, _ *as.Actor, args json.RawMessage) (any, error) {
	var a struct{ Path, Content string }
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if strings.TrimSpace(a.Path) == "" {
		return nil, &as.Error{Code: as.ErrInvalidArgument, Message: "a file needs a path", MissingFields: []string{"path"}}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.files[a.Path]; ok {
		return nil, &as.Error{Code: as.ErrInvalidArgument, Message: a.Path + " already exists"}
	}
	w.files[a.Path] = a.Content
	return map[string]any{"path": a.Path, "created": true, "bytes": len(a.Content)}, nil
}

func (w *workspace) syncIndex(_ context.Context, _ *as.Actor, args json.RawMessage) (any, error) {
	var a struct {
		IndexFile string   `json:"index_file"`
		Entries   []string `json:"entries"`
	}
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	doc, ok := w.files[a.IndexFile]
	if !ok {
		return nil, notFound("index file", a.IndexFile)
	}
	for _, e := range a.Entries {
		doc += "- " + e + "\n"
	}
	w.files[a.IndexFile] = doc
	return map[string]any{"index_file": a.IndexFile, "added": len(a.Entries)}, nil
}
