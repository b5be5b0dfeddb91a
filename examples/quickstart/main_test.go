package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"【来自用户的消息】\n做一个静态网页计算器",
		"【来自 root（root）的消息】",
		"\"HTML + JavaScript\"",
		"【来自 lead（agent-1）的消息】\nYour calculator is ready: artifact:",
		"reviewed by agent-2: pass",
		"root\n  agent-1 (lead)\n    agent-2 (tester)\n    agent-3 (developer)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q\n--- output ---\n%s", want, got)
		}
	}
}
