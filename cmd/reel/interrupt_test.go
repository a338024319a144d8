//go:build unix

package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildReel builds the reel command into a temporary folder, for tests
// that need a real process (signals).
func buildReel(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build reel with")
	}
	bin := filepath.Join(t.TempDir(), "reel")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestInterruptExits130 starts a long prompt fed a row at a time, sends
// SIGINT once the prompt is echoed, and expects reel to stop within a
// couple of seconds with status 130 and a quiet note on stderr.
func TestInterruptExits130(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := buildReel(t)
	ids := make([]string, 3000)
	for i := range ids {
		ids[i] = strconv.Itoa(32 + i%90)
	}
	cmd := exec.Command(bin, "run", "--prompt-ids", strings.Join(ids, ","), "--chunk", "1", "--tokens", "5")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The prompt is echoed before the prefill starts.
	r := bufio.NewReader(stdout)
	if _, err := r.ReadByte(); err != nil {
		cmd.Process.Kill()
		t.Fatalf("no output: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	sent := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = r.WriteTo(new(bytes.Buffer)) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("reel still running 10 s after SIGINT; stderr:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit %v, want status %d; stderr:\n%s", err, exitInterrupted, stderr.String())
	}
	if took := time.Since(sent); took > 2*time.Second {
		t.Errorf("reel took %v to stop after SIGINT", took)
	}
	if got := stderr.String(); !strings.Contains(got, "interrupted") || strings.Contains(got, "panic") || strings.Contains(got, "prefill:") {
		t.Errorf("stderr after SIGINT:\n%s", got)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("killed by %v, want an exit", ws.Signal())
	}
}
