package engine

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/dispatcher"
	"github.com/sipvisor/sipvisor/internal/sipmsg"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/ticketkey"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/sessions"
	"github.com/sipvisor/sipvisor/script"
	"github.com/sipvisor/sipvisor/worker"
	"github.com/sipvisor/sipvisor/worker/engine/txn"
)

// DefaultInviteTimeout is InviteTimeout when none is set: OpenSIPS's and
// Kamailio's default fr_inv_timeout.
const DefaultInviteTimeout = sessions.InviteTimeout

// Options configure a Worker. Zero timer fields take the RFC 3261 defaults.
type Options struct {
	// Script is the routing script; its main route runs for each request.
	Script *script.Script
	// Sockets are the UDP sockets to send from (the supervisor's, so the
	// source address is the listening one); a message's socket index selects
	// one.
	Sockets []net.PacketConn
	// ReplySockets, when set, stand beside Sockets (same index): requests
	// relayed over UDP leave from them and name them in their Via, so their
	// responses come straight back to this worker (worker.Env.OpenReplySockets).
	ReplySockets []net.PacketConn
	// Listen lists the config's sockets: with Sockets' real addresses they
	// make up "myself", and the TCP ones are advertised in Via and
	// Record-Route for TCP hops.
	Listen []config.Socket
	// Store holds the registrations save() and lookup() use.
	Store location.Store
	// GroupCommit holds the store writes of save() until the loop's turn
	// ends (EndTurn), to do those of every REGISTER of the turn at once;
	// each REGISTER is answered once its write is done. Set only where a
	// loop calls EndTurn (worker.Run); without it each save() writes at once.
	GroupCommit bool
	// Domains are the served domains (the domain setting): is_myself() is
	// true of them, and the first is the home of AORs at this server's own
	// addresses.
	Domains []string
	// AORKeepPort files AORs with their URI's port (aor_keep_port).
	AORKeepPort bool
	// NATKeepaliveMethod is what a NAT keep-alive is: "OPTIONS" (also
	// when empty) or "CRLF" (nat_keepalive_method).
	NATKeepaliveMethod string
	// NonceExpire is how long a digest nonce is accepted (nonce_expire;
	// 300 s when zero), and AuthAlgorithms the algorithms challenges offer
	// (auth_algorithms; MD5 when empty).
	NonceExpire    time.Duration
	AuthAlgorithms []string
	// ReportStoreErrors, when set, is told (at most once a second, from
	// Tick) how many store calls failed since its last call: the
	// supervisor counts them in a metric.
	ReportStoreErrors func(n uint64)
	// Logger receives xlog output and protocol warnings.
	Logger *slog.Logger
	// Submit runs fn on the worker's loop; TCP readers hand messages over
	// with it.
	Submit func(fn func())
	// Admit, when set, is admission's decision (worker.Env.Admit) about a
	// new session of class c and kind k that came over a connection this
	// worker reads itself (TCP), which no front door saw, wait ns after it
	// was read: a refusal gets the 503 with Retry-After the door sends over
	// UDP: refuse says so, with the Retry-After seconds. Nil admits
	// everything.
	Admit func(c overload.Class, k sipscan.Kind, method sipscan.Method, callID []byte, wait int64) (refuse bool, retryAfter int)
	// Late, when set, says whether a message read from a connection at
	// readAt (unix ns) waited longer than max_queue_wait (worker.Env.Late);
	// RefusedLate counts the requests refused for it.
	Late        func(readAt int64) bool
	RefusedLate func()
	// NoteSession, when set, tells the supervisor of each request read from
	// a connection that moves a session on, for the session count
	// (wire.SessionNote); the door counts those that come over UDP.
	NoteSession func(method sipscan.Method, toTag bool, expires int32, branch, callID []byte)
	// RetryAfter is what the worker's own refusals send, as the door's do.
	RetryAfter config.RetryAfter
	// TLS holds the certificates of tls: and wss: sockets and TLS next
	// hops.
	TLS config.TLS
	// TicketKeys seal and open the TLS session tickets of the tls: and
	// wss: sockets, shared with the other workers so that a client resumes
	// its session on any of them; nil: crypto/tls's own keys, this
	// process's alone. Used on the loop only.
	TicketKeys *ticketkey.Ratchet
	// WSAllowedOrigins are the web origins whose pages may open a
	// WebSocket to the ws: and wss: sockets (ws_allowed_origins); empty
	// allows any.
	WSAllowedOrigins []string
	// Conn bounds what a connection may cost in time; zero fields take
	// Kamailio's defaults.
	Conn config.ConnLimits
	// ConnClosed, when set, is told of each connection the supervisor
	// handed over that ends, and why.
	ConnClosed func(reason, remote string)
	// HandOff, when set, gives a draining worker's connection back to the
	// supervisor (wire.HandOffNote); nil keeps connections to the end.
	HandOff func(remote string, prefix, tlsState []byte)
	// PassResponse, when set, passes a response to the worker whose pid its
	// branch names (wire.ForwardNote).
	PassResponse func(pid int, from string, msg []byte)
	// Dispatcher is the destination sets of ds_select_dst (ds_list_file).
	Dispatcher []dispatcher.Dest
	// ReportDispatch, when set, sends the supervisor what the worker sent
	// to each destination and what a script marked
	// (dispatcher.EncodeReport).
	ReportDispatch func(report []byte)
	// DispatchOC: ds_overload_control, RFC 7339 toward the destinations.
	DispatchOC bool
	// OverloadControl, when set, reads the RFC 7339 feedback this server
	// sends to clients that offer oc (wire.OffOverloadControl).
	OverloadControl func() uint64

	// T1, T2 and T4 are RFC 3261's timer bases (500ms, 4s, 5s).
	T1, T2, T4 time.Duration
	// InviteTimeout bounds an INVITE branch after its first provisional reply
	// (OpenSIPS's fr_inv_timeout): DefaultInviteTimeout when zero. The front
	// door keeps a pending INVITE's Call-ID with its worker for longer
	// (frontdoor.PendingInviteTTL), so a larger value needs that one raised.
	InviteTimeout time.Duration
	// Linger is how long a finished transaction stays to absorb
	// retransmissions and match the ACK of a 2xx over UDP (OpenSIPS's
	// wt_timer; T4 by default).
	Linger time.Duration
	// DialTimeout bounds opening a TCP connection to a next hop.
	DialTimeout time.Duration
	// Banned, when set, says whether a source is banned (package
	// overload/pike) and whether its requests are answered 403 rather than
	// dropped: a banned source's request read from a connection closes the
	// connection. CountRequest, when set, counts a request read from a
	// connection per source, for the supervisor's table of bans; the front
	// doors count those that come over UDP. AuthFailed, when set, is told
	// of each failed digest authentication (wire.AuthFailNote).
	Banned       func(src netip.Addr) (banned, reply bool)
	CountRequest func(src netip.Addr)
	AuthFailed   func(src netip.Addr, user string)
	// PassToHolder, when set, asks the supervisor to hand msg, a request
	// received from from on UDP socket sock, to the worker that reads the
	// connection from to, and reports whether it did: a request for a
	// TCP or TLS peer that accepts no connections (a phone behind NAT, a
	// client such as sipload) can only go over the one the peer opened.
	PassToHolder func(sock int, to, from netip.AddrPort, msg []byte) bool
	// WriteVia, when set, asks the supervisor to have the worker that
	// reads the connection from to write msg on it (wire.WriteRequest;
	// flags wire.FlowOutbound), and reports whether one does: a phone's
	// flow is written by the worker holding it, TLS session and all.
	WriteVia func(flags byte, to netip.AddrPort, msg []byte) bool
}

// Worker is the SIP engine of one worker process: it parses each message,
// runs the routing script and keeps the transaction table. All its methods
// run on the worker's single loop (worker.Handler), so it holds no locks.
type Worker struct {
	opt    Options
	log    *slog.Logger
	parser *sip.Parser
	scan   sipscan.Msg // relayResponse's, reused
	// fmsg is the request handled on its bytes (fast.go), ipBuf the
	// received address its Via gets, fastCtx a context to reuse.
	fmsg    sipmsg.Msg
	bs      bytesState
	ipBuf   [64]byte
	fastCtx *msgCtx
	keyBuf  []byte
	// wbuf is where requests are written before they are relayed.
	wbuf msgBuf

	// reg is what REGISTERs on the bytes reuse (regbytes.go).
	reg regBytes

	// raw is the request being handled as it was received, while the
	// script runs for it (msgCtx.raw).
	raw []byte

	udpLocal  []netip.AddrPort
	replyPort []uint16 // of the reply sockets, by socket index
	tcpListen []netip.AddrPort
	tlsListen []netip.AddrPort
	wsListen  []netip.AddrPort
	wssListen []netip.AddrPort
	// tlsServer and tlsClient are the TLS configurations of the tls:
	// sockets and of connections to TLS next hops, nil without TLS
	// settings; a reload replaces them for new connections.
	tlsServer, tlsClient *tls.Config
	self                 []selfAddr
	// ticketsOn is the tlsServer whose ticket keys are set from
	// opt.TicketKeys.
	ticketsOn *tls.Config

	txns *txTable
	// pairs are the transaction pairs free to reuse (txpool.go).
	pairs []*txPair
	// bufs are the buffers free for pairs to take (txpool.go).
	bufs [][]byte
	// ghost is a settled record read back as its transactions (txpool.go).
	ghost txPair

	conns    map[netip.AddrPort]*tcpConn
	draining bool

	branchPrefix string
	pid          int
	branchSeq    uint64

	regex map[string]*regexpEntry
	tmpl  map[*script.Literal][]tmplPart

	// home is the domain of AORs at this server's own addresses; localIPs
	// are the host's addresses, which a socket on 0.0.0.0 owns.
	home     string
	localIPs map[netip.Addr]bool
	// The store's credentials and the nonce key, read at first use.
	authUsers  location.Users
	authSecret []byte
	// Store failures: when last logged and reported, and the count then.
	storeLogAt, storeReportAt  time.Time
	loopLogAt                  time.Time
	storeLogged, storeReported uint64
	// regs are the REGISTERs whose writes wait for the turn to end.
	regs regBatch

	// ds is the destination sets and their states (dispatch.go).
	ds dsView

	// Stats, read by tests and reported in logs.
	Stats Stats
}

// Stats counts what a worker did.
type Stats struct {
	Requests, Responses, Malformed, Retransmissions, Timeouts, SendErrors uint64
	// Misdirected counts requests outside a dialog that came to a reply
	// socket and were refused there.
	Misdirected uint64
	// StatelessAcks counts ACKs of replies sent without a transaction,
	// which end at the worker.
	StatelessAcks uint64
	// Refused counts new sessions over TCP that admission control refused.
	Refused uint64
	// Late counts requests over TCP refused for having waited longer than
	// max_queue_wait.
	Late uint64
	// TLSHandshakeFailures counts TLS handshakes, in either direction, that
	// failed or timed out.
	TLSHandshakeFailures uint64
	// WSRefused counts WebSocket Upgrades refused, failed or timed out.
	WSRefused uint64
	// HandedOff counts connections a draining worker gave back, and
	// TLSTaken the TLS ones this worker took with their state.
	HandedOff, TLSTaken uint64
	// PassedResponses counts responses passed to the worker that holds
	// their transaction.
	PassedResponses uint64
	// Passed counts requests handed to the worker that holds the
	// connection to their destination (Options.PassToHolder).
	Passed uint64
	// NATKeepalives counts the keep-alives sent to phones behind NAT.
	NATKeepalives uint64
	// WrittenVia counts messages written on a connection another worker
	// reads (Options.WriteVia), and FlowsGone requests answered 480 or 430
	// because the connection of their flow was gone.
	WrittenVia, FlowsGone uint64
	// StoreErrors counts registrar and lookup calls the location store
	// failed.
	StoreErrors uint64
	// Loops counts requests answered 482 because their next hop was this
	// server.
	Loops uint64
	// Replays counts credentials refused for a nonce-count already used.
	Replays uint64
	// AuthFailures counts credentials that failed (Options.AuthFailed).
	AuthFailures uint64
	// Banned counts requests over TCP from banned sources, refused.
	Banned uint64
}

// New builds the handler of a worker process from what the supervisor
// passed: the config file's script (or the built-in one) and the shared
// sockets. It is worker.Run's newHandler.
func New(env *worker.Env) (worker.Handler, error) {
	var cfg *config.Config
	if env.Config == "" {
		cfg = config.Default()
	} else {
		var err error
		if cfg, err = config.LoadFile(env.Config); err != nil {
			return nil, err
		}
	}
	logger := env.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	store, err := storeFor(env, cfg, logger)
	if err != nil {
		return nil, err
	}
	listen, err := boundListen(cfg.Sockets)
	if err != nil {
		return nil, err
	}
	opt := Options{
		Script:  cfg.Script,
		Sockets: env.Sockets,
		Listen:  listen,
		Store:   store,
		Logger:  logger,
		Submit:  env.Submit,
		Admit:   admitFor(env),
		Late:    env.Late,

		NoteSession: noteFor(env),

		Banned:       env.Banned,
		CountRequest: env.CountRequest,
		AuthFailed:   authFailedFor(env),

		RefusedLate: env.RefusedLate,
		RetryAfter:  cfg.RetryAfter,
		TLS:         cfg.TLS,
		TicketKeys:  env.TicketKeys,
		Conn:        cfg.Conn,
		ConnClosed:  closedFor(env),
		HandOff:     handOffFor(env),

		WSAllowedOrigins: cfg.WSAllowedOrigins,

		PassResponse:       passResponseFor(env),
		PassToHolder:       passFor(env, logger),
		WriteVia:           writeFor(env, logger),
		Domains:            cfg.Domains,
		AORKeepPort:        cfg.AORKeepPort,
		NATKeepaliveMethod: cfg.NAT.KeepaliveMethod,
		NonceExpire:        cfg.Auth.NonceExpire,
		AuthAlgorithms:     cfg.Auth.Algorithms,
		ReportStoreErrors:  reportFor(env, logger),
		Dispatcher:         cfg.Dispatcher.Dests,
		ReportDispatch:     dispatchFor(env),
		DispatchOC:         cfg.Dispatcher.OverloadControl,
		OverloadControl:    env.OverloadControl,

		// worker.Run ends its turns (worker.TurnEnder).
		GroupCommit: true,
	}
	// A TCP worker's relays over UDP leave from the SIP socket, whatever
	// worker_reply_sockets says: its connections, and with them the
	// dialogs it relayed, move to other workers when it drains (a
	// scale-down, an upgrade), and a callee may send everything of a call
	// to where its INVITE came from (SIPp's uas does), the answer to a BYE
	// another worker relayed too. The SIP socket outlives every worker; a
	// port of this worker's own would be closed by then. The responses its
	// transactions get reach it through whichever UDP worker reads them,
	// passed on by the pid their branch names (passResponse).
	if cfg.Workers.ReplySockets && env.Kind != wire.KindTCP && env.OpenReplySockets != nil && len(env.Sockets) > 0 {
		rs, err := env.OpenReplySockets()
		if err != nil {
			return nil, err
		}
		opt.ReplySockets = rs
	}
	w, err := NewWorker(opt)
	if err != nil {
		return nil, err
	}
	w.fetchDispatch(env.Call)
	return w, nil
}

// boundListen is the sockets the supervisor serves, as it bound them
// (listeners.EnvBound), rather than as the file writes them: a port 0 is
// the port the kernel gave, and a socket added to the file since start-up
// is not served until a restart. Without the variable (a worker not started
// by a supervisor), the file's sockets.
func boundListen(file []config.Socket) ([]config.Socket, error) {
	v, ok := os.LookupEnv(listeners.EnvBound)
	if !ok {
		return file, nil
	}
	addrs, err := listeners.ParseAddrs(v)
	if err != nil {
		return nil, fmt.Errorf("sip engine: %s: %w", listeners.EnvBound, err)
	}
	out := make([]config.Socket, len(addrs))
	for i, a := range addrs {
		out[i] = config.Socket{Proto: a.Proto, Host: a.Host, Port: a.Port}
	}
	return out, nil
}

// NewWorker returns a Worker for opt.
func NewWorker(opt Options) (*Worker, error) {
	if opt.Script == nil {
		return nil, errors.New("sip engine: no routing script")
	}
	if opt.Store == nil {
		opt.Store = location.NewMemory()
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Submit == nil {
		opt.Submit = func(fn func()) { fn() }
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opt.T1, 500*time.Millisecond)
	def(&opt.T2, 4*time.Second)
	def(&opt.T4, 5*time.Second)
	def(&opt.InviteTimeout, DefaultInviteTimeout)
	def(&opt.Linger, opt.T4)
	def(&opt.DialTimeout, 2*time.Second)
	def(&opt.NonceExpire, 300*time.Second)
	if len(opt.AuthAlgorithms) == 0 {
		opt.AuthAlgorithms = []string{"MD5"}
	}

	var rnd [4]byte
	rand.Read(rnd[:])
	w := &Worker{
		opt:    opt,
		log:    opt.Logger,
		parser: sip.NewParser(),
		conns:  map[netip.AddrPort]*tcpConn{},
		txns: txn.NewTable[*serverTx, *clientTx](txn.Timers{T1: opt.T1, T2: opt.T2, T4: opt.T4,
			InviteTimeout: opt.InviteTimeout, Linger: opt.Linger}),
		// The pid names the worker that holds the transaction, so that a
		// response that reaches another worker can be passed to it
		// (branchOwner).
		branchPrefix: "z9hG4bK" + hex.EncodeToString(rnd[:]) + "-" + strconv.FormatInt(int64(os.Getpid()), 36) + ".",
		pid:          os.Getpid(),
		regex:        map[string]*regexpEntry{},
		tmpl:         map[*script.Literal][]tmplPart{},
	}
	for i, s := range opt.Sockets {
		ap, err := netip.ParseAddrPort(s.LocalAddr().String())
		if err != nil {
			return nil, fmt.Errorf("sip engine: socket %d: %w", i, err)
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		w.udpLocal = append(w.udpLocal, ap)
		w.self = append(w.self, selfAddr{ap, "udp"})
	}
	if len(opt.ReplySockets) > 0 && len(opt.ReplySockets) != len(opt.Sockets) {
		return nil, fmt.Errorf("sip engine: %d reply sockets for %d sockets", len(opt.ReplySockets), len(opt.Sockets))
	}
	for i, s := range opt.ReplySockets {
		ap, err := netip.ParseAddrPort(s.LocalAddr().String())
		if err != nil {
			return nil, fmt.Errorf("sip engine: reply socket %d: %w", i, err)
		}
		w.replyPort = append(w.replyPort, ap.Port())
		// Its Via names the SIP socket's advertised host with this port.
		w.self = append(w.self, selfAddr{netip.AddrPortFrom(w.udpLocal[i].Addr(), ap.Port()), "udp"})
	}
	for _, s := range opt.Listen {
		a, err := netip.ParseAddr(s.Host)
		if err != nil {
			continue
		}
		ap := netip.AddrPortFrom(a, uint16(s.Port))
		if s.Proto == "tcp" {
			w.tcpListen = append(w.tcpListen, ap)
		}
		switch s.Proto {
		case "tls":
			w.tlsListen = append(w.tlsListen, ap)
		case "ws":
			w.wsListen = append(w.wsListen, ap)
		case "wss":
			w.wssListen = append(w.wssListen, ap)
		}
		if s.Port != 0 {
			w.self = append(w.self, selfAddr{ap, s.Proto})
		}
	}
	if len(w.tlsListen) > 0 || len(w.wssListen) > 0 {
		var err error
		if w.tlsServer, err = opt.TLS.ServerConfig(); err != nil {
			return nil, fmt.Errorf("sip engine: %w", err)
		}
	}
	w.home = homeDomain(opt.Domains, w.self, opt.AORKeepPort)
	w.localIPs = interfaceIPs()
	w.setDispatch(opt.Dispatcher)
	return w, nil
}

// serverTLS is the configuration of the tls: and wss: sockets for a
// connection accepted now: its session ticket keys stepped to the current
// period, the same keys every worker has.
func (w *Worker) serverTLS() *tls.Config {
	if k := w.opt.TicketKeys; k != nil {
		moved := k.Advance(time.Now())
		if moved || w.ticketsOn != w.tlsServer {
			w.tlsServer.SetSessionTicketKeys(k.Keys())
			w.ticketsOn = w.tlsServer
		}
	}
	return w.tlsServer
}

// Held is the number of live transactions, so a draining worker exits only
// when none is left.
func (w *Worker) Held() int { return w.txns.Len() + w.heldConns() }

// Reload loads the config file at path and runs its script from the next
// message on (worker.Reloader). Transactions armed with t_on_reply or
// t_on_failure before it find their route by name in the new script, and
// skip it if the new script has no such route. Sockets and other settings
// stay as they were: they change only when a worker starts.
func (w *Worker) Reload(path string) error {
	cfg, err := config.LoadFile(path)
	if err != nil {
		return err
	}
	if len(w.tlsListen) > 0 || len(w.wssListen) > 0 {
		// New certificates for new connections; those up keep theirs.
		srv, err := cfg.TLS.ServerConfig()
		if err != nil {
			return err
		}
		w.tlsServer = srv
	}
	w.tlsClient = nil
	w.opt.TLS = cfg.TLS
	w.opt.Conn = cfg.Conn
	w.opt.WSAllowedOrigins = cfg.WSAllowedOrigins
	w.opt.Script = cfg.Script
	w.opt.RetryAfter = cfg.RetryAfter
	w.opt.Domains, w.opt.AORKeepPort = cfg.Domains, cfg.AORKeepPort
	w.opt.NATKeepaliveMethod = cfg.NAT.KeepaliveMethod
	w.home = homeDomain(cfg.Domains, w.self, cfg.AORKeepPort)
	w.opt.NonceExpire, w.opt.AuthAlgorithms = cfg.Auth.NonceExpire, cfg.Auth.Algorithms
	w.opt.Dispatcher = cfg.Dispatcher.Dests
	w.opt.DispatchOC = cfg.Dispatcher.OverloadControl
	w.setDispatch(cfg.Dispatcher.Dests)
	// The cache is keyed by the old script's literals.
	w.tmpl = map[*script.Literal][]tmplPart{}
	w.log.Info("script reloaded", "file", path)
	return nil
}

// Close releases the worker's location store (worker.Run calls it as the
// process ends).
func (w *Worker) Close() error { return w.opt.Store.Close() }

// HandleMessage handles one datagram received on the supervisor's socket.
func (w *Worker) HandleMessage(m *worker.Message) {
	w.handle(m.Data, source{proto: "udp", addr: m.From, sock: m.Socket, direct: m.Direct})
}

// HandleJob runs timer_route[name].
func (w *Worker) HandleJob(name string) {
	if isKeepaliveJob(name) {
		w.natKeepalive()
		return
	}
	for _, t := range w.opt.Script.Timers {
		if t.Name == name {
			c := w.newCtx(nil, nil, source{sock: -1})
			c.run(t.Body)
			return
		}
	}
	w.log.Warn("no timer_route of that name", "name", name)
}

// Tick fires the transaction timers that are due.
func (w *Worker) Tick(now time.Time) {
	if w.draining {
		w.handOffParked()
	}
	w.reportStoreErrors(now)
	w.dsTick(now)
	w.txns.Expire(now)
	for {
		t, ok := w.txns.Due(now)
		if !ok {
			return
		}
		switch t := t.(type) {
		case *serverTx:
			w.fireServer(t, now)
		case *clientTx:
			w.fireClient(t, now)
		}
	}
}

// source is where a message came from and how to answer it.
type source struct {
	proto string // "udp", "tcp", "tls", "ws" or "wss"
	addr  netip.AddrPort
	sock  int      // UDP socket index
	conn  *tcpConn // TCP connection, nil for UDP
	// direct: it came to the worker's reply socket, not through the door.
	direct bool
	// readAt is when a message from a connection was read (unix ns).
	readAt int64
}

// local is the address this server is reached at for s: the socket it came
// in on.
func (w *Worker) local(s source) (netip.AddrPort, string) {
	if s.conn != nil {
		return w.tcpAdvertised(s.conn), s.conn.transport()
	}
	if s.sock >= 0 && s.sock < len(w.udpLocal) {
		return w.udpLocal[s.sock], "UDP"
	}
	if len(w.udpLocal) > 0 {
		return w.udpLocal[0], "UDP"
	}
	return netip.AddrPort{}, "UDP"
}

func (w *Worker) handle(data []byte, src source) {
	if len(data) > 8 && string(data[:8]) == "SIP/2.0 " {
		w.ocTake(data, src)
		if w.relayResponse(data) {
			w.Stats.Responses++
			return
		}
		if w.passResponse(data, src) {
			return
		}
	}
	if w.handleBytes(data, src) {
		return
	}
	msg, err := w.parser.ParseSIP(data)
	if err != nil {
		w.Stats.Malformed++
		w.log.Debug("malformed sip message", "from", src.addr.String(), "error", err)
		return
	}
	if msg.Via() == nil || msg.CallID() == nil || msg.CSeq() == nil || msg.From() == nil || msg.To() == nil {
		w.Stats.Malformed++
		w.log.Debug("sip message lacks a mandatory header", "from", src.addr.String())
		return
	}
	repairVias(msg)
	switch m := msg.(type) {
	case *sip.Request:
		w.Stats.Requests++
		w.raw = data
		w.onRequest(m, src)
		w.raw = nil
	case *sip.Response:
		w.Stats.Responses++
		w.onResponse(m, src)
	}
}

// takeDirect says whether a request that came to a reply socket may be
// handled. The reply socket is named only in the Via of the requests this
// worker relays, so what belongs there is their responses; Record-Route
// names the SIP socket. A request outside a dialog sent there would skip
// the front door, and with it the admission control that may be refusing
// new sessions: it is refused with a 403 that says where to send it (whose
// ACK ends with those of the other stateless replies, ackOfStatelessReply).
// A CANCEL and in-dialog requests start no session, so they are handled as
// if they had come through the door.
func (w *Worker) takeDirect(req *sip.Request, src source) bool {
	if _, ok := param(req.To().Params, "tag"); ok || req.Method == sip.CANCEL {
		return true
	}
	w.Stats.Misdirected++
	if req.Method != sip.ACK {
		w.replyStateless(req, src, 403, "Forbidden (send requests to the SIP port)", nil)
	}
	return false
}

// noteReceived notes in req's top Via where it really came from (RFC 3261
// 18.2.1, RFC 3581), so replies find their way back through NAT.
func (w *Worker) noteReceived(req *sip.Request, src source) {
	via := req.Via()
	if src.addr.IsValid() {
		// The address is compared as written on the stack: it is made a
		// string only to be added, which most requests do not need.
		var ab [64]byte
		ip := src.addr.Addr().AppendTo(ab[:0])
		same := via.Host == string(ip)
		if !same {
			via.Params.Add("received", string(ip))
		}
		if v, ok := via.Params.Get("rport"); ok && v == "" {
			via.Params.Add("rport", strconv.Itoa(int(src.addr.Port())))
			if same {
				via.Params.Add("received", string(ip))
			}
		}
	}
}

func (w *Worker) onRequest(req *sip.Request, src source) {
	w.noteReceived(req, src)
	if w.ackOfStatelessReply(req) {
		w.Stats.StatelessAcks++
		return
	}
	if src.direct && !w.takeDirect(req, src) {
		return
	}
	if src.conn != nil {
		if w.refuseBanned(req, src) || w.late(req, src) || !w.admit(req, src) {
			return
		}
		w.noteSession(req)
	}
	c := w.newCtx(req, nil, src)
	c.raw = w.raw
	c.run(w.opt.Script.Routes[""])
}

// dest is where a message is sent.
type dest struct {
	proto string // "udp" or "tcp"
	addr  netip.AddrPort
	sock  int
	conn  *tcpConn
	reply bool // over UDP, from the reply socket beside sock
	// flow: the connection a phone registered on (flow.go), never
	// connected to; ob: the phone asked for outbound (430 when gone).
	// alt, for a flow whose contact names an address of its own (no ;ob),
	// is that contact: connected to when the flow is gone.
	flow, ob bool
	alt      *dest
}

func (w *Worker) send(d *dest, b []byte) error {
	b = w.ocStamp(b)
	if stream(d.proto) {
		if d.conn == nil || d.conn.closed {
			// This worker's connection, else the one another worker
			// reads (a phone's flow, a connection handed over), else a
			// new one: but never to a phone's flow.
			if tc, ok := w.conns[d.addr]; ok && !tc.closed && tc.proto() == d.proto {
				d.conn = tc
				return w.send(d, b)
			}
			if w.writeVia(d, b) {
				return nil
			}
			if d.flow && d.alt != nil {
				// The flow is gone; the contact is tried as it says, and
				// failing that the branch ends as a gone flow's does.
				flow := *d
				*d = *d.alt
				err := w.send(d, b)
				if err != nil {
					*d = flow
					return fmt.Errorf("%w; its contact: %w", errFlowGone, err)
				}
				return nil
			}
			if d.flow {
				w.Stats.SendErrors++
				return errFlowGone
			}
			c, err := w.connTo(d.addr, d.proto)
			if err != nil {
				w.Stats.SendErrors++
				return err
			}
			d.conn = c
		}
		if err := d.conn.write(b); err != nil {
			w.Stats.SendErrors++
			return err
		}
		return nil
	}
	if d.sock < 0 || d.sock >= len(w.opt.Sockets) {
		d.sock = 0
	}
	if len(w.opt.Sockets) == 0 {
		return errors.New("no udp socket to send from")
	}
	s := w.opt.Sockets[d.sock]
	if d.reply && d.sock < len(w.opt.ReplySockets) {
		s = w.opt.ReplySockets[d.sock]
	}
	var err error
	if u, ok := s.(interface {
		WriteToUDPAddrPort([]byte, netip.AddrPort) (int, error)
	}); ok {
		_, err = u.WriteToUDPAddrPort(b, d.addr)
	} else {
		_, err = s.WriteTo(b, net.UDPAddrFromAddrPort(d.addr))
	}
	if err != nil {
		w.Stats.SendErrors++
	}
	return err
}

// resolve turns a URI into a destination. Hosts are IP addresses or names
// resolved once here; the transport parameter picks TCP, TLS, WS or WSS,
// and a sips: URI asks for TLS, or WSS over WebSocket (RFC 3261 19.1,
// 26.2; RFC 7118 5).
func (w *Worker) resolve(u *sip.Uri, sock int) (dest, error) {
	d := dest{proto: "udp", sock: sock}
	if t, ok := u.UriParams.Get("transport"); ok {
		switch t = strings.ToLower(t); t {
		case "tcp", "tls", "ws", "wss":
			d.proto = t
		}
	}
	if strings.EqualFold(u.Scheme, "sips") {
		switch d.proto {
		case "ws", "wss":
			d.proto = "wss"
		default:
			d.proto = "tls"
		}
	}
	port := u.Port
	if port == 0 {
		switch d.proto {
		case "tls":
			port = 5061
		case "ws":
			port = 80
		case "wss":
			port = 443
		default:
			port = 5060
		}
	}
	ip, err := hostIP(u.Host)
	if err != nil {
		return d, err
	}
	d.addr = netip.AddrPortFrom(ip, uint16(port))
	return d, nil
}

func hostIP(host string) (netip.Addr, error) {
	host = strings.Trim(host, "[]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap(), nil
	}
	// RFC 6761 6.4: never looked up. WebSocket clients (RFC 7118 5.2)
	// and other clients that accept no connections name such a host in
	// their Via and Contact.
	if h := strings.ToLower(strings.TrimSuffix(host, ".")); h == "invalid" || strings.HasSuffix(h, ".invalid") {
		return netip.Addr{}, fmt.Errorf("resolve %s: a .invalid name is never resolved (RFC 6761)", host)
	}
	if strings.EqualFold(host, "localhost") {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %s: %w", host, err)
	}
	return ips[0].Unmap(), nil
}

func (w *Worker) newBranch() string {
	w.branchSeq++
	return w.branchPrefix + strconv.FormatUint(w.branchSeq, 36)
}

func netipAddrPort(ip netip.Addr, port int) netip.AddrPort {
	return netip.AddrPortFrom(ip, uint16(port))
}

// NextTimer is when the earliest pending timer is due, so that an idle
// worker sleeps instead of ticking.
func (w *Worker) NextTimer() (time.Time, bool) { return w.txns.Next() }
