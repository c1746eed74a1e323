// Package fastrpc is a small request/response transport for the store
// master's hot calls (put start and end, replica lists, existence checks),
// next to gRPC on the same port.
//
// A gRPC unary call on loopback costs two goroutine hand-offs on each side
// (caller to the HTTP/2 writer, reader to the handler, handler to the
// writer, reader to the caller), HPACK headers and trailers, and a dozen
// allocations; on this project's 2-core machines it was about half the
// time of a 4 KiB put or get. fastrpc frames carry the same protobuf
// messages with a 13-byte header; the server handles a connection's
// requests in order on the goroutine that reads them and answers each at
// once (answers to pipelined requests leave in one write), and the client
// multiplexes concurrent calls on one connection, matching answers by id.
// The client has no reader goroutine: a caller whose answer has not been
// delivered takes the connection's read token and reads answers itself
// (delivering the others') until its own comes, so with one call in flight
// the answer wakes its caller straight from the netpoller. Concurrent
// calls share write system calls: a caller that finds another writing
// queues its frame, and the writer sends what was queued with its own
// before it returns. CallBy takes a deadline instead of a context deadline
// (no timer per call): the reader sets it as the connection's read
// deadline only when the one set is later, and one that passes early
// wakes the reader, which moves it and reads on. The end of a caller's ctx
// wakes its read through a context.AfterFunc; for a ctx without a deadline
// (a long-lived one, passed to every call) the client keeps that one
// AfterFunc across calls instead of registering one per call, and it acts
// only while a call of that ctx reads. Client.Alive answers at
// once for a connection that delivered an answer within RecentWindow and
// peeks the socket otherwise, for callers that must know a connection
// still works before they act on it (the store's put slots). The server
// reads each request's payload in place (the handler gets a view of the
// read buffer, valid during the call) and writes header and answer into
// its buffered writer without another copy.
//
// Wire format (little endian), after the client's 8-byte preface Preface,
// which the server sends back (a gRPC-only server closes the connection, so
// Dial fails and the caller keeps to gRPC):
//
//	request:  length u32 | method u8 | id u64 | payload   (length counts method, id and payload)
//	response: length u32 | status u8 | id u64 | payload   (status: StatusOK, StatusUnknownMethod, StatusBadRequest)
//
// Credentials and TLS: a server whose Mux has an Authenticator
// (SetAuthenticator) reads each connection's first frame as its credential
// (method MethodHello, payload a bearer token) and serves the connection
// with the handler the Authenticator returns, decided once per connection
// (a first frame that is not MethodHello is a connection without a
// credential: the Authenticator decides with nil, and a request it lets
// in is served); a refusal is answered StatusUnauthenticated and ends the
// connection, as does a handler's
// StatusUnauthenticated answer later (a credential revoked while the
// connection was open). DialWith sends the credential frame after the
// preface and fails with ErrUnauthenticated when it is refused. For TLS the
// server wraps its listener in crypto/tls before NewMux (the split by first
// bytes then reads decrypted bytes) and DialWith wraps the TCP connection
// (DialOptions.TLS); a TLS client does not use the same-host socket.
//
// Frames are at most MaxFrame bytes; a longer length, or a preface that is
// not Preface, ends the connection. Requests are handled in order, so
// answers come back in order, but the client does not rely on it.
//
// Serving: Mux splits one listener into the gRPC server's connections and
// fastrpc connections by their first bytes (gRPC's HTTP/2 preface "PRI *"
// against Preface), so the master needs no second port. On Linux the master
// also serves fastrpc on a same-host socket: ListenLocal binds the abstract
// unix socket LocalName(addr) ("@mooncake-fastrpc/" + the TCP address as
// bound; nothing on disk, freed with the listener) and NewLocalMux serves
// it (fastrpc only: other connections are closed). Dial(addr) tries that
// socket first and falls back to TCP: a round trip over a unix socket costs
// about half the system-call time of loopback TCP (the kernel's TCP stack
// is most of a small call's cost on a 2-core machine). The name is that of
// one bound TCP address, so it leads to the server listening there; a
// client that names the master otherwise (another address of the host, a
// host name) uses TCP. Over that socket a client offers two pipes
// (PrefacePipes, their server ends passed with SCM_RIGHTS) and, when the
// server takes them, the frames travel over the pipes while the socket
// stays open as the liveness link: reading from a unix socket wakes the
// writer's process with "writable" after every message (Go's netpoller
// waits for writability on every socket), a pipe only when it was full.
// Reads and writes of sockets and pipes are raw system calls through their
// syscall.RawConn (rawIO), waiting in the netpoller when they would block:
// a Go system call wakes the runtime's sysmon thread when the process was
// idle, once per call for a process that makes one call at a time.
// Calling: Dial, then
// Client.Call; an error wrapping ErrNotSent means the request never left
// (the caller may send it another way), any other error that it may or may
// not have been handled, as with any RPC.
package fastrpc
