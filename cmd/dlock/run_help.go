package main

// runHelp is the long help of "dlock run".
const runHelp = `run takes the lock NAME, runs COMMAND with ARGS while holding it, and exits with
the command's exit status: flock(1) across hosts. The lock is renewed while the
command runs and released when it ends, however it ends. The typical use is a
cron job on several hosts that must run on one of them at a time:

  dlock run nightly-report --no-wait --quiet --min-hold 10m -- /usr/local/bin/report.sh

Waiting: run waits for the lock as long as it takes, in arrival order;
--wait DURATION gives up after DURATION (or a number of seconds, as with
flock -w), --no-wait (or --wait 0) at once; --quiet says nothing then.
With --permits N, up to N runs hold the name at once (a semaphore; each run
takes one permit). The name with --permits is a different lock from the same
name without it: use one or the other for a job, and the same N in every
run of it (N is not stored: each run counts against its own).

The command's environment also has:
  DLOCK_NAME      the lock's name
  DLOCK_TOKEN     this grant's fencing token, larger than every earlier grant's:
                  pass it to what the command writes to, so that a run that
                  lost the lock can be refused
  DLOCK_PERMITS   with --permits, the number of permits N

If the lock is lost while the command runs (Redis unreachable for a whole TTL,
the key deleted, "dlock unlock --force"), run does what --on-lost says:
terminate (SIGTERM, then SIGKILL after --grace, to the processes the command
started too, even when it exits first), kill (SIGKILL at once) or report
(let the command finish); then it exits with 70.

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock
are passed on to the command; dlock waits for it to end, releases the lock,
and exits with the command's status. The command runs in a process group of
its own, so that signals reach every process it started, and a Ctrl-C in a
terminal reaches it once, through dlock. Processes it leaves running in the
background are not waited for. A command in a process group of its own
cannot read from the terminal, though: --foreground keeps it in dlock's
group, for interactive commands. The terminal then sends Ctrl-C (SIGINT,
SIGQUIT) to the command itself, so while dlock is the terminal's foreground
job it passes on only the other signals (SIGTERM reaches the command from
it; without a terminal, or in the background, all of them do), and a lost
lock signals the command but not its children. Each signal
passed on is followed by SIGCONT, as GNU timeout does, so that a stopped
command (one that read the terminal from its own group gets SIGTTIN) still
ends. On Linux the command's own process is killed if dlock itself dies
without cleaning up (SIGKILL, out of memory), since nothing renews the lock
then; processes it started are not (exec the job from a wrapper script).

Containers: as a container's entrypoint (PID 1), or a child subreaper,
dlock also reaps the orphaned processes the kernel hands it, as an init
does. As PID 1, whatever the command leaves running is killed by the
kernel when dlock exits.

Job control: dlock is not suspended while its command runs. A stopped dlock
would not renew the lock, which would expire while the command (in its own
group, not stopped) went on, and another host's run would start beside it.
So Ctrl-Z (SIGTSTP) only prints a note and the command runs on (with
--foreground, dlock continues the command the terminal stopped); Ctrl-C
ends it. SIGTTOU and SIGTTIN are ignored meanwhile.

Exit status:
  N        the command's own; 128+S when a signal S killed it
  75       the lock was not obtained: held elsewhere with --no-wait, or --wait
           expired while it was held (-E/--conflict-exit-code changes it, as
           with flock)
  70       the lock was lost while the command ran (--lost-exit-code changes it)
  126/127  the command (or a script's #! interpreter) could not be run / was
           not found: checked before the lock is taken, and a start that
           fails even so releases the lock at once
  128+S    dlock got signal S while waiting for the lock; the command did not run
  2        invalid command line or lock name, or no Redis server configured
  1        any other error: Redis unreachable, or failing until --wait expired
           (not 75: trying again later succeeds only once Redis is back)`

// runExample is the examples section of "dlock run"'s help.
const runExample = `  dlock run nightly-report --no-wait --quiet --min-hold 10m -- /usr/local/bin/report.sh
  dlock run db-migrate --wait 10m -- ./migrate up
  dlock run thumbnails --permits 4 -- ./render.sh "$file"
  REDIS_URL=rediss://cache.internal:6380 dlock run backup -- sh -c 'pg_dump ... | gzip > "/backups/$DLOCK_TOKEN.gz"'`
