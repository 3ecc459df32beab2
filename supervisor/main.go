package supervisor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/sipvisor/sipvisor/config"
)

const usage = `sipvisor: an auto-scaling, overload-safe SIP server front end.

Usage:
  sipvisor [-f FILE] [-log.level LEVEL] [-log-format text|json]
                                   run (the built-in config without -f)
  sipvisor -c [-f FILE]            check the config: "ok" or FILE:LINE:COL errors
  sipvisor -print-default-config   print the built-in config
  sipvisor ctl [-addr URL] COMMAND control a running sipvisor (sipvisor ctl -h)
  sipvisor version                 print the version

Flags:
`

// Main is the sipvisor command. It returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version", "-version", "--version":
			fmt.Fprintln(stdout, "sipvisor", Version)
			return 0
		case "ctl":
			return runCtl(ctx, args[1:], stdout, stderr)
		}
	}
	// A process an upgrade started tells the old one what goes wrong at
	// start, through the pipe that is its stderr until the hand-over.
	inherited, err := takeInheritance()
	if err != nil {
		fmt.Fprintln(stderr, "sipvisor:", err)
		return 1
	}
	if inherited != nil {
		stderr = inherited.out
	}
	fs := flag.NewFlagSet("sipvisor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "config `file` (opensips.cfg style); the built-in config when empty")
	check := fs.Bool("c", false, "check the config and exit: prints ok, or every problem as FILE:LINE:COL: message")
	printDefault := fs.Bool("print-default-config", false, "print the built-in config and exit")
	level := fs.String("log.level", "", "log `level`: debug, info, warn, error (default: the config's log_level, info)")
	format := fs.String("log-format", "", "log `format` of the supervisor and its workers: text or json (default: the config's log_format, text)")
	// The dotted spelling came first; scripts that use it keep working.
	fs.StringVar(format, "log.format", "", "the same as -log-format")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sipvisor: unexpected argument %q (see sipvisor -h)\n", fs.Arg(0))
		return 2
	}
	if *printDefault {
		fmt.Fprint(stdout, config.DefaultText)
		return 0
	}
	cfg, err := loadConfig(*file)
	if *check {
		if err != nil {
			printConfigErrors(stderr, err)
			return 1
		}
		fmt.Fprintln(stdout, "ok")
		return 0
	}
	if err != nil {
		printConfigErrors(stderr, err)
		return 1
	}
	// The flag wins over the file; without it, a reload applies the file's
	// log_level.
	lv := *level
	if lv == "" {
		lv = cfg.LogLevel
	}
	lf := *format
	if lf == "" {
		lf = cfg.LogFormat
	}
	logger, levelVar, err := newLogger(stderr, lv, lf)
	if err != nil {
		fmt.Fprintln(stderr, "sipvisor:", err)
		return 2
	}
	if *level != "" {
		levelVar = nil
	}
	logger = slog.New(genHandler{logger.Handler(), generation()})
	s, err := New(Options{Config: cfg, ConfigPath: *file, Logger: logger, LogLevel: levelVar, LogFormat: strings.ToLower(lf), inherited: inherited})
	if err != nil {
		fmt.Fprintln(stderr, "sipvisor:", err)
		return 1
	}
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "sipvisor:", err)
		return 1
	}
	return 0
}

func loadConfig(file string) (*config.Config, error) {
	if file == "" {
		return config.Load(config.DefaultName, []byte(config.DefaultText))
	}
	return config.LoadFile(file)
}

// printConfigErrors prints each problem on its own line.
func printConfigErrors(w io.Writer, err error) {
	var multi interface{ Unwrap() []error }
	if errors.As(err, &multi) {
		for _, e := range multi.Unwrap() {
			fmt.Fprintln(w, e)
		}
		return
	}
	fmt.Fprintln(w, err)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, *slog.LevelVar, error) {
	if level == "" {
		level = "info"
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("-log.level %q: want debug, info, warn or error", level)
	}
	lv := new(slog.LevelVar)
	lv.Set(l)
	o := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, o)), lv, nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), lv, nil
	}
	return nil, nil, fmt.Errorf("-log-format %q: want text or json", format)
}

var _ = os.Stdout
