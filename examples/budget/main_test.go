package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

func TestBudget(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^user got from agent-1: The writers used their budgets`,
		// root 2 calls, the lead 4 and its writers 3 each: 12, the
		// task's budget, and 10, the lead's share.
		`(?m)^task task-\w+: 12/12 model calls, 4800 input and 600 output tokens$`,
		`(?m)^└─ agent-1: 10/10 model calls, 4000 input and 500 output tokens$`,
		`(?m)^   ├─ agent-2: 3/3 model calls, 1200 input and 150 output tokens$`,
		`(?m)^   └─ agent-3: 3/3 model calls, 1200 input and 150 output tokens$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %s\n--- output ---\n%s", want, out.String())
		}
	}
}
