// Package sipworker is the SIP engine of a worker process: it parses each
// message the supervisor hands over (github.com/emiago/sipgo's parser and
// message types), runs the routing script (route, onreply_route,
// failure_route, timer_route) and relays requests statefully, sending from
// the supervisor's own sockets so the source address is the listening one.
//
// New is pool.RunWorker's newHandler; NewWorker builds one from Options, as
// tests do.
package sipworker
