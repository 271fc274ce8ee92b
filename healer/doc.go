// Package healer is Paddock's self-healing loop: it runs a job's command
// in the job's one container through an Executor, classifies a failure,
// and retries with a repair, at most three command runs per job.
//
// A failure is classified (Classify) as a missing command (exit 127, in
// bash, dash, busybox, env, xargs or timeout wording, with the binary's
// name), a command that cannot be executed (126), a resource kill
// (timeout, oom, pids_limit, output_cap, fsize: terminal unless the job's
// policy retries them, so a fork bomb ends as pids_limit), or another
// failure. The repair is chosen by a chain of repairers, the first with a
// fix winning, in this order:
//
//  1. the heal memo (MemoStore, in Redis): a fix that worked for the same
//     failure fingerprint before, replayed without calling the LLM;
//  2. an install, for a missing command when the job's policy allows it:
//     the binary is mapped to packages and the installer template runs in
//     the same container (user-space: the sandbox's root is read-only and
//     it runs unprivileged without network), then the same command again;
//  3. the rules: deterministic rewrites such as python → python3;
//  4. in llm mode, an OpenAI-compatible chat-completions endpoint asked for
//     one corrected command, under a per-job token budget. Command output
//     is attacker-controlled: it travels as JSON data in its own message,
//     never in the instructions.
//
// Budgets nest: each command has its timeout, each install its own, and
// the context's deadline is the job's; repairs start only with time left
// for the retry. Every attempt is recorded (job.Attempt) with the action,
// the installer run before it and a note saying what was decided and why,
// and traced: a "paddock.attempt" span per command and a "paddock.heal"
// span per repair (paddock.heal.action, paddock.heal.outcome) holding the
// install, rule or LLM call ("chat <model>", gen_ai.* attributes) and the
// retry.
//
// The package imports only job/ and internal/redact of Paddock; the worker
// adapts its sandbox session to Executor. docs/healing.md is the
// operator's guide.
package healer
