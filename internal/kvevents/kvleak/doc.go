// Package kvleak gives the goroutine-leak checks of tests that run ZMQ
// sockets (kvevents publishers and subscribers) the goleak options that
// ignore the ZMQ library's own leftover goroutines
// (kvevents.ZMQLeakFuncs): `goleak.VerifyTestMain(m, kvleak.IgnoreZMQ()...)`.
package kvleak
