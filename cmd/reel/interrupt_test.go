//go:build unix

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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

// TestSecondInterruptKills: after the first interrupt, a second one kills
// the process at once, even when it does not look at its context (a call
// into the driver, say). The test runs itself as the process.
func TestSecondInterruptKills(t *testing.T) {
	if os.Getenv("REEL_SECOND_INTERRUPT") == "1" {
		ctx, _ := interruptContext()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("first")
		time.Sleep(30 * time.Second) // busy elsewhere: only the signal's default action ends this
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSecondInterruptKills$")
	cmd.Env = append(os.Environ(), "REEL_SECOND_INTERRUPT=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(out)
	expect := func(want string) {
		t.Helper()
		line, err := r.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
	}
	expect("ready")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	expect("first")
	start := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the process ended with %v, not killed by the second interrupt", err)
	}
	ws, ok := ee.Sys().(interface{ Signaled() bool })
	if !ok || !ws.Signaled() || time.Since(start) > 5*time.Second {
		t.Fatalf("the process ended with %v after %v: want it killed by the signal at once", err, time.Since(start))
	}
}
