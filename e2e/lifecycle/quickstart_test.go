package lifecycle

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// quickStart is the shell text of README.md's "Quick start" section: every
// line of its ```sh blocks, in order.
func quickStart(readme string) []string { return shellSection(readme, "## Quick start") }

// shellSection is the shell text of a markdown section, heading the whole
// heading line ("## Quick start"): every line of its ```sh blocks, in
// order, up to the next heading of level 2 or 3.
func shellSection(doc, heading string) []string {
	_, sec, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return nil
	}
	for _, next := range []string{"\n## ", "\n### "} {
		if i := strings.Index(sec, next); i >= 0 {
			sec = sec[:i]
		}
	}
	var lines []string
	in := false
	for _, l := range strings.Split(sec, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```sh":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in && strings.TrimSpace(l) != "":
			lines = append(lines, l)
		}
	}
	return lines
}

// quickStartScript runs the lines as written, in one shell, stopping at the
// first that fails and naming it. A line that runs in the background is
// waited for at the end, and must exit 0 too.
func quickStartScript(lines []string) string {
	var b strings.Builder
	b.WriteString("set -e\nbg=()\ntrap 'echo \"quick start: exit $? from: $BASH_COMMAND\" >&2' ERR\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
		code, _, _ := strings.Cut(l, "#")
		if strings.HasSuffix(strings.TrimSpace(code), "&") {
			b.WriteString("bg+=($!)\n")
		}
	}
	b.WriteString(`for p in "${bg[@]}"; do
	if ! wait "$p"; then echo "quick start: a background command exited $?" >&2; exit 1; fi
done
`)
	return b.String()
}

func TestQuickStartExtract(t *testing.T) {
	t.Parallel()
	readme := "# x\n## Quick start\n\n```sh\nmake build  # b\n```\n\ntext\n\n```\nnot shell\n```\n```sh\nbin/a &   # c\nbin/b\n```\n## Next\n```sh\nno\n```\n"
	have := strings.Join(quickStart(readme), "|")
	if want := "make build  # b|bin/a &   # c|bin/b"; have != want {
		t.Fatalf("want %q, have %q", want, have)
	}
	doc := "# t\n## A\n```sh\na\n```\n### Sub\n```sh\nno\n```\n"
	if have := strings.Join(shellSection(doc, "## A"), "|"); have != "a" {
		t.Fatalf("want the section to end at its subsection, have %q", have)
	}
	if s := quickStartScript(quickStart(readme)); !strings.Contains(s, "bin/a &   # c\nbg+=($!)\nbin/b\n") {
		t.Fatalf("want the background line's pid kept, have\n%s", s)
	}
}

// The README's quick start, run as written in a copy of the source tree:
// every command exits 0, the calls included; then docs/SIPLOAD.md's
// callee section, likewise. The commands use the fixed
// ports of the built-in config (5060, 5070, 8888), as a new user's would;
// no other test binds them (the others bind port 0, or give SIPp a port
// the kernel picked), and the test is skipped when something else holds
// them, outside CI.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the quick start: about 15 s")
	}
	for _, lack := range []string{"make", "bash"} {
		if _, err := exec.LookPath(lack); err != nil {
			t.Skipf("%s not found", lack)
		}
	}
	for _, a := range []string{"udp:127.0.0.1:5060", "tcp:127.0.0.1:5060", "udp:127.0.0.1:5070", "tcp:127.0.0.1:8888"} {
		if err := portFree(a); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("the quick start needs %s: %v", a, err)
			}
			t.Fatalf("the quick start needs %s: %v", a, err)
		}
	}
	readme, err := os.ReadFile(harness.Path("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := quickStart(string(readme))
	if len(lines) < 5 {
		t.Fatalf("README.md: want a Quick start section with ```sh blocks, have %q", lines)
	}
	dir := t.TempDir()
	if err := copyTree(harness.Root, dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err = runShell(ctx, dir, quickStartScript(lines), &out)
	log, _ := os.ReadFile(filepath.Join(dir, "sipvisor.log"))
	if err != nil {
		t.Fatalf("quick start: %v\n%s\nsipvisor.log:\n%s", err, out.String(), harness.Tail(string(log), 30))
	}
	for _, want := range []string{"ok\n", "ready\n", "succeeded 100  failed 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in the quick start's output, have\n%s", want, out.String())
		}
	}

	// docs/SIPLOAD.md's "A callee behind the built-in config", on the same
	// fixed ports, so after the quick start: its commands as written, in
	// an empty directory, with the quick start's bin/ on the PATH.
	doc, err := os.ReadFile(harness.Path("docs/SIPLOAD.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines = shellSection(string(doc), "## A callee behind the built-in config")
	if len(lines) < 5 {
		t.Fatalf("docs/SIPLOAD.md: want a section \"A callee behind the built-in config\" with ```sh blocks, have %q", lines)
	}
	sub := filepath.Join(dir, "callee-doc")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runShell(ctx, sub, quickStartScript(lines), &out, "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH")); err != nil {
		log, _ := os.ReadFile(filepath.Join(sub, "sipvisor.log"))
		t.Fatalf("docs/SIPLOAD.md's callee section: %v\n%s\nsipvisor.log:\n%s", err, out.String(), harness.Tail(string(log), 30))
	}
	if !strings.Contains(out.String(), "succeeded 100  failed 0") {
		t.Errorf("docs/SIPLOAD.md's callee section: want 100 calls succeeded, have\n%s", out.String())
	}
}

// runShell runs script with bash in dir, in a process group of its own
// killed when it ends, so that nothing it started outlives it.
func runShell(ctx context.Context, dir, script string, out io.Writer, env ...string) error {
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return err
}

// portFree says whether a proto:host:port can be bound.
func portFree(a string) error {
	proto, addr, _ := strings.Cut(a, ":")
	if proto == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// copyTree copies the source tree without its git data and build output.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == ".git" && !d.IsDir() {
			return nil // a worktree's pointer to its repository
		}
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "out":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(rel, ".test") {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		info, err := in.Stat()
		if err != nil {
			return err
		}
		o, err := os.OpenFile(filepath.Join(dst, rel), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(o, in); err != nil {
			o.Close()
			return err
		}
		return o.Close()
	})
}
