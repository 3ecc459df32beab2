package loadgen

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Exit codes of sipload, for automation (docs/SIPLOAD.md).
const (
	ExitOK      = 0 // failed calls within --max-failed
	ExitFailed  = 1 // more failed calls than --max-failed
	ExitUsage   = 2 // bad flags or arguments
	ExitError   = 3 // could not run: bind, connect, write CSV or plot
	ExitNoCalls = 4 // a client scenario offered calls and completed none
)

// config is everything the command line says; Options is the part Run needs.
type config struct {
	Options
	csv          string
	plot         string
	metrics      string
	maxFailed    int64
	quiet        bool
	sf           string // -sf: the XML scenario file
	sd           string // -sd: print this built-in scenario and exit
	traceMsg     string // -trace_msg log file, "" for none
	traceErr     string // -trace_err log file
	timeoutError bool
}

// listFlag collects a flag given several times (-inf a.csv -inf b.csv).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// pairArgs takes SIPp's two-value flags (-key NAME VALUE) out of args,
// since the flag package gives a flag one value.
func pairArgs(args []string) (rest []string, keys map[string]string, err error) {
	keys = map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-key" || a == "--key" {
			if i+2 >= len(args) {
				return nil, nil, fmt.Errorf("%w: %s wants a name and a value", ErrUsage, a)
			}
			keys[args[i+1]] = args[i+2]
			i += 2
			continue
		}
		rest = append(rest, a)
	}
	return rest, keys, nil
}

// durationFlag reads a SIPp time value: a bare number in a default unit.
type durationFlag struct {
	d    *time.Duration
	unit time.Duration
}

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := parseDuration(s, f.unit)
	if err != nil {
		return fmt.Errorf("want a number or a duration such as 1500ms")
	}
	*f.d = d
	return nil
}

func parseArgs(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{}
	args, keys, err := pairArgs(args)
	if err != nil {
		return nil, err
	}
	o := &cfg.Options
	fs := flag.NewFlagSet("sipload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		rate, rateIncr, rateMax float64
		ratePeriod              = time.Second
		rateInterval            time.Duration
		noRateQuit              bool
		schedule                string
		traceStat               bool
		stf                     string
	)
	fs.StringVar(&o.Scenario, "sn", "uac", "scenario: uac, uas, register or options")
	fs.Float64Var(&rate, "r", 10, "call rate: calls per -rp period")
	fs.Var(durationFlag{&ratePeriod, time.Millisecond}, "rp", "rate period (ms, or a duration such as 5s)")
	fs.Float64Var(&rateIncr, "rate_increase", 0, "add this to the rate every -rate_interval")
	fs.Float64Var(&rateMax, "rate_max", 0, "with -rate_increase: stop one interval after reaching this rate")
	fs.Var(durationFlag{&rateInterval, time.Second}, "rate_interval", "interval of -rate_increase (s, or a duration; default -fd, 60s)")
	fs.BoolVar(&noRateQuit, "no_rate_quit", false, "with -rate_increase: keep going at -rate_max")
	fs.StringVar(&schedule, "schedule", "", "rate schedule 'CPS/DURATION,...' such as '10/20s,350/60s', or @FILE")
	fs.Int64Var(&o.MaxCalls, "m", 0, "stop after this many calls")
	fs.IntVar(&o.Limit, "l", 0, "most simultaneous calls (0: no limit)")
	fs.Var(durationFlag{&o.Hold, time.Millisecond}, "d", "call length between ACK and BYE (ms, or a duration)")
	fs.StringVar(&o.Service, "s", "service", "user part of the Request-URI (and register user prefix)")
	fs.StringVar(&o.LocalIP, "i", "", "local IP address")
	fs.IntVar(&o.LocalPort, "p", 0, "local port (0: any free port; uas default 5060)")
	fs.StringVar(&o.Transport, "t", "u1", "transport: u1 (UDP, one socket), t1 (TCP, one connection) or l1 (TLS, one connection)")
	fs.StringVar(&o.TLSCert, "tls_cert", "", "l1: certificate file, PEM (default cacert.pem; a client goes without if it is absent)")
	fs.StringVar(&o.TLSKey, "tls_key", "", "l1: private key file of -tls_cert, PEM (default cakey.pem)")
	fs.StringVar(&o.TLSCA, "tls_ca", "", "l1: CA file, PEM: verify the peer's certificate against it (a server then asks clients for one); without it nothing is verified")
	fs.StringVar(&o.TLSVersion, "tls_version", "", "l1: speak only this TLS version: 1.0, 1.1, 1.2 or 1.3 (default: 1.2 or later, negotiated)")
	fs.StringVar(&o.TLSGroups, "tls_groups", "", "l1: offer only these key exchange groups, comma-separated: x25519, p256, p384, p521, x25519mlkem768 (default: Go's, a post-quantum hybrid first)")
	fs.BoolVar(&o.Handshakes, "tls_handshakes", false, "l1: each call is a new connection, closed once its TLS handshake is done; no SIP is sent (what handshakes cost a server)")
	fs.BoolVar(&o.TLSResume, "tls_resume", false, "with -tls_handshakes: resume the session of a first connection (its ticket) in every handshake")
	fs.Var(durationFlag{&o.Timeout, time.Second}, "timeout", "end the run after this long (s, or a duration)")
	fs.Var(durationFlag{&o.RecvTimeout, time.Millisecond}, "recv_timeout", "transaction timeout (ms, or a duration; default 64*T1)")
	fs.Var(durationFlag{&o.T1, time.Millisecond}, "t1", "RFC 3261 timer T1 (ms, or a duration)")
	fs.BoolVar(&o.NoRetrans, "nr", false, "disable UDP retransmissions")
	fs.IntVar(&o.BufSize, "buff_size", 4<<20, "socket send and receive buffer size in bytes")
	fs.IntVar(&o.Users, "users", 0, "client scenarios: calls are N users in turn, each refreshing its own (same Call-ID, next CSeq; 0: every call new)")
	fs.IntVar(&o.Expires, "expires", 3600, "-sn register: Expires in seconds (and the uas's answer to a REGISTER)")
	fs.IntVar(&o.RejectEvery, "reject_every", 0, "server scenarios: refuse every Nth new INVITE with 503 and Retry-After")
	fs.BoolVar(&o.OC, "oc", false, "client scenarios: RFC 7339 overload control: offer oc in each request's Via and shed the share of new calls the server's feedback asks")
	fs.StringVar(&o.Scrape, "scrape", "", "Prometheus metrics URL of the server, read each second")
	fs.StringVar(&cfg.csv, "csv", "", "write one CSV row per second to this file")
	fs.BoolVar(&traceStat, "trace_stat", false, "write per-second CSV statistics (to -stf, or sipload_<scenario>_<pid>.csv)")
	fs.StringVar(&stf, "stf", "", "file for -trace_stat")
	fs.StringVar(&cfg.plot, "plot", "", "draw the run into FILE.svg or FILE.png")
	fs.StringVar(&cfg.metrics, "metrics", "", "serve sipload's own Prometheus metrics on this address (such as 127.0.0.1:9099) during the run")
	fs.Int64Var(&cfg.maxFailed, "max-failed", 0, "failure budget: exit 0 only if at most this many calls failed")
	fs.BoolVar(&cfg.quiet, "q", false, "no live status line")
	fs.StringVar(&cfg.sf, "sf", "", "run this SIPp XML scenario file (see docs/SIPLOAD.md for what is supported)")
	fs.StringVar(&cfg.sd, "sd", "", "print built-in scenario NAME (uac, uas, register, options) as an XML scenario and exit")
	var inf listFlag
	fs.Var(&inf, "inf", "CSV file for [fieldN] (first line SEQUENTIAL or RANDOM); may be repeated")
	fs.StringVar(&o.Rsa, "rsa", "", "send to this host:port instead of the target ([remote_ip] stays the target)")
	fs.StringVar(&o.AuthUser, "au", "", "user name of digest credentials (default: the registering user, or -s)")
	fs.StringVar(&o.AuthPass, "ap", "", "password of digest credentials: -sf scenarios answer 401/407 with [authentication] (default \"password\", as SIPp); built-in scenarios answer one challenge per call when it is given")
	var traceMsg, traceErr bool
	fs.BoolVar(&traceMsg, "trace_msg", false, "log every message sent and received to <scenario>_<pid>_messages.log")
	fs.BoolVar(&traceErr, "trace_err", false, "log unexpected messages and failed calls to <scenario>_<pid>_errors.log")
	fs.StringVar(&cfg.traceMsg, "message_file", "", "file for -trace_msg")
	fs.StringVar(&cfg.traceErr, "error_file", "", "file for -trace_err")
	fs.IntVar(&o.MaxRetrans, "max_retrans", 0, "UDP retransmissions before a call fails (default 5 for INVITE, 9 for others)")
	fs.BoolVar(&cfg.timeoutError, "timeout_error", false, "exit 1 when -timeout ends the run")
	fs.BoolVar(&o.AutoAnswer, "aa", false, "answer INFO, NOTIFY, OPTIONS and UPDATE the scenario does not expect with 200")
	fs.StringVar(&o.CidStr, "cid_str", "", "Call-ID format: %u call number, %p pid (-sn: a run ID), %s local IP (default %u-%p@%s)")
	fs.IntVar(&o.BaseCSeq, "base_cseq", 0, "first [cseq] of each call (default 1)")
	// Accepted so SIPp command lines run unchanged: rows are always written
	// every second, and sipload never reads stdin. -fd still sets SIPp's
	// default -rate_interval.
	fd := time.Minute
	fs.Var(durationFlag{&fd, time.Second}, "fd", "SIPp's statistics period (s); only the default of -rate_interval here, CSV rows are always per second")
	fs.Bool("nostdin", false, "accepted for SIPp compatibility; sipload never reads stdin")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sipload [target host:port] [flags]\n\nSIPp-compatible flags where SIPp has them; long flags take one or two dashes.\n\n")
		fs.PrintDefaults()
		// -key takes two values, so pairArgs reads it and the flag set
		// does not know it.
		fmt.Fprintf(stderr, "  -key NAME VALUE\n    \t[NAME] in a scenario's messages becomes VALUE; may be repeated\n")
	}
	// SIPp users put the target first; flag stops at it, so parse in turns.
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		if o.Target != "" {
			return nil, fmt.Errorf("%w: more than one target: %q and %q", ErrUsage, o.Target, rest[0])
		}
		o.Target = rest[0]
		rest = rest[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.Inf = inf
	if cfg.sd != "" {
		return cfg, nil
	}
	if cfg.sf != "" {
		if set["sn"] {
			return nil, fmt.Errorf("%w: -sf and -sn both name a scenario; give one", ErrUsage)
		}
		sc, err := LoadScenario(cfg.sf, keys)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUsage, err)
		}
		o.XML = sc
		if sc.uas {
			o.Scenario = "uas"
		}
	}
	logName := func(suffix string) string {
		base := "sipload_" + o.Scenario
		if cfg.sf != "" {
			base = strings.TrimSuffix(filepath.Base(cfg.sf), ".xml")
		}
		return base + "_" + strconv.Itoa(os.Getpid()) + suffix
	}
	if traceMsg && cfg.traceMsg == "" {
		cfg.traceMsg = logName("_messages.log")
	}
	if !traceMsg {
		cfg.traceMsg = ""
	}
	if traceErr && cfg.traceErr == "" {
		cfg.traceErr = logName("_errors.log")
	}
	if !traceErr {
		cfg.traceErr = ""
	}
	if set["recv_timeout"] {
		o.xmlRecvTimeout = o.RecvTimeout
	}
	if o.Scenario == "uas" && !set["p"] {
		o.LocalPort = 5060
	}
	if rate < 0 || ratePeriod <= 0 {
		return nil, fmt.Errorf("%w: -r must be >= 0 and -rp > 0", ErrUsage)
	}
	perSec := rate / ratePeriod.Seconds()
	switch {
	case schedule != "":
		if set["r"] || set["rate_increase"] {
			return nil, fmt.Errorf("%w: --schedule replaces -r and -rate_increase; give one of them", ErrUsage)
		}
		s, err := ParseSchedule(schedule)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUsage, err)
		}
		o.Schedule = s
	case rateIncr > 0:
		if rateInterval <= 0 {
			rateInterval = fd // as in SIPp
		}
		o.Schedule = Ramp(perSec, rateIncr/ratePeriod.Seconds(), rateMax/ratePeriod.Seconds(), rateInterval, noRateQuit)
	default:
		o.Schedule = Constant(perSec)
	}
	if traceStat && cfg.csv == "" {
		cfg.csv = stf
		if cfg.csv == "" {
			cfg.csv = "sipload_" + o.Scenario + "_" + strconv.Itoa(os.Getpid()) + ".csv"
		}
	}
	if cfg.plot != "" && !strings.HasSuffix(cfg.plot, ".svg") && !strings.HasSuffix(cfg.plot, ".png") {
		return nil, fmt.Errorf("%w: --plot %q: want a .svg or .png file name", ErrUsage, cfg.plot)
	}
	if o.MaxCalls < 0 || o.Limit < 0 || cfg.maxFailed < 0 {
		return nil, fmt.Errorf("%w: -m, -l and --max-failed cannot be negative", ErrUsage)
	}
	return cfg, o.defaults()
}

// Main runs sipload with command-line args and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "sipload: %v\n", err)
		return ExitUsage
	}
	if cfg.sd != "" {
		b, err := BuiltinXML(cfg.sd)
		if err != nil {
			fmt.Fprintf(stderr, "sipload: %v\n", err)
			return ExitUsage
		}
		stdout.Write(b)
		return ExitOK
	}
	for _, t := range []struct {
		name string
		w    *io.Writer
	}{{cfg.traceMsg, &cfg.Options.TraceMsg}, {cfg.traceErr, &cfg.Options.TraceErr}} {
		if t.name == "" {
			continue
		}
		f, err := os.Create(t.name)
		if err != nil {
			fmt.Fprintf(stderr, "sipload: %v\n", err)
			return ExitError
		}
		bw := bufio.NewWriterSize(f, 64<<10)
		defer f.Close()
		defer bw.Flush()
		*t.w = bw
	}
	var csvw *csvWriter
	if cfg.csv != "" {
		f, err := os.Create(cfg.csv)
		if err != nil {
			fmt.Fprintf(stderr, "sipload: %v\n", err)
			return ExitError
		}
		defer f.Close()
		csvw = newCSVWriter(f)
	}
	status := newStatus(stderr, cfg.quiet)
	o := cfg.Options
	if cfg.metrics != "" {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			fmt.Fprintf(stderr, "sipload: %v\n", err)
			return ExitError
		}
		o.Metrics = m
		ln, err := net.Listen("tcp", cfg.metrics)
		if err != nil {
			fmt.Fprintf(stderr, "sipload: metrics: %v\n", err)
			return ExitError
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		fmt.Fprintf(stderr, "sipload: metrics on http://%s/metrics\n", ln.Addr())
	}
	o.OnListen = func(a netip.AddrPort) {
		name := o.Scenario
		if o.XML != nil {
			name = o.XML.File
		}
		fmt.Fprintf(stderr, "sipload: %s on %s/%s", name, a, transportName(o.Transport))
		if o.Target != "" {
			fmt.Fprintf(stderr, " -> %s", o.Target)
		}
		fmt.Fprintln(stderr)
	}
	o.OnRow = func(r Row) {
		if csvw != nil {
			csvw.write(r)
		}
		status.row(r)
	}
	st, runErr := Run(ctx, o)
	status.end()
	if csvw != nil {
		if err := csvw.close(); err != nil {
			fmt.Fprintf(stderr, "sipload: write %s: %v\n", cfg.csv, err)
			return ExitError
		}
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		fmt.Fprintf(stderr, "sipload: %v\n", runErr)
		if st.Offered == 0 {
			return ExitError
		}
	}
	writeSummary(stdout, &o, st)
	if cfg.plot != "" {
		if err := Plot(cfg.plot, st.Rows); err != nil {
			fmt.Fprintf(stderr, "sipload: plot: %v\n", err)
			return ExitError
		}
	}
	switch {
	case st.Failed > cfg.maxFailed:
		return ExitFailed
	case cfg.timeoutError && st.TimedOut:
		fmt.Fprintf(stderr, "sipload: -timeout %v reached (-timeout_error)\n", o.Timeout)
		return ExitFailed
	case o.Scenario != "uas" && st.Succeeded == 0 && st.Offered > 0:
		return ExitNoCalls
	}
	return ExitOK
}
