// Package bench is floodbench's library (cmd/floodbench holds its flags):
// the servers and Redis a run starts and supervises, the in-process load
// generator and ghz's, the workloads, the tables and what they are read
// against, callgrind's instruction counts and what execution traces show a
// decision wakes. It lives outside the command so that the command stays
// flags and wiring, and each part is tested where it is written.
package bench
