package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"agentsociety/internal/demo"
)

// TestInspect runs the program on a free loopback port: the inspector
// there shows the quick start's organisation and artifact, and the program ends cleanly when its context does, having
// printed the address and the answer.
func TestInspect(t *testing.T) {
	ln, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer // read once run returned
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, &out, demo.Model(), false) }()

	base := "http://" + ln.Addr().String()
	// The task runs until the lead has answered user.
	for guard := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if time.Now().After(guard) {
			cancel()
			<-done
			t.Fatalf("the task still runs after a minute; the program printed:\n%s", out.String())
		}
		tasks := getJSON[[]struct{ State string }](t, base+"/api/tasks")
		if len(tasks) == 1 && tasks[0].State != "running" {
			break
		}
	}
	artifacts := getJSON[[]struct{ Name string }](t, base+"/api/artifacts")
	if len(artifacts) != 1 || artifacts[0].Name != "calculator.html" {
		t.Errorf("artifacts %+v", artifacts)
	}
	org := getJSON[struct {
		AllowSend bool `json:"allow_send"`
		Agents    []struct {
			Role string `json:"role"`
		} `json:"agents"`
	}](t, base+"/api/org")
	var roles []string
	for _, a := range org.Agents {
		roles = append(roles, a.Role)
	}
	if got := strings.Join(roles, " "); got != "root lead tester developer user" || org.AllowSend {
		t.Errorf("roles %q, allow_send %v", got, org.AllowSend)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the program did not end a minute after its context")
	}
	if !strings.Contains(out.String(), "inspector on "+base+"/") || !strings.Contains(out.String(), "user receives from") {
		t.Errorf("the program did not print the answer:\n%s", out.String())
	}
}

// TestListen refuses an address beyond loopback.
func TestListen(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:80"} {
		if ln, err := listen(addr); err == nil {
			ln.Close()
			t.Errorf("listen(%q) served beyond loopback", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		ln, err := listen(addr)
		if err != nil {
			t.Errorf("listen(%q): %v", addr, err)
			continue
		}
		if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
			t.Errorf("listen(%q) is on %v", addr, ln.Addr())
		}
		ln.Close()
	}
}

func getJSON[T any](t *testing.T, url string) T {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v T
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}
