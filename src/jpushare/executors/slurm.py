"""`SlurmExecutor`: the Executor that runs JPU-Share's jobs as Slurm batch jobs.

The only code that runs `sinfo`, `sbatch`, `squeue`, `scancel`; every command goes through
one narrow method (`_run`), every answer through the pure parsers in `slurm_parse`.
Tested against a real slurmctld + slurmd (scripts/slurm/start-fake-cluster.sh).

How a run maps onto Slurm:
- name: the Slurm job name `jps-<job_id>-<attempt>` (prefix configurable) carries the
  JPU-Share job id, so a restarted dispatcher finds its jobs with `squeue` and `submit` is
  idempotent (it looks the name up before calling sbatch);
- placement: `--nodelist=<node> --gres=gpu:<GRES type>:<n> [--partition=<tier partition>]`;
- `--no-requeue`: on a node failure Slurm would requeue the job still pinned to the dead
  node; instead it ends NODE_FAIL and the dispatcher requeues it (SPEC §5);
- as whom: `--uid/--gid` of the owner's account (`LaunchSpec.unix_user`) when
  `submit_as_user` (default: when the service runs as root; Slurm's SlurmUser may too), so
  slurmd runs the job as the user inside Slurm's own isolation (cgroups, as configured);
- where, with what (jobs with a `workdir`): `--chdir`, checked first as the owner (Slurm
  would run the job in /tmp instead); the job's environment exactly, as sbatch's own
  (`export` lines at the top of the batch script: sbatch itself runs with the service's
  PATH and SLURM_CONF only, so the submitter's PATH or LD_PRELOAD never reach the root
  process; SBATCH_*/SLURM_* input variables are dropped), the account's
  HOME/USER/LOGNAME/SHELL;
  stdout/stderr in the owner's files (`--output/--error`, %j and %a substituted here, any
  other % escaped, `--open-mode=append` as the local executor), which slurmd creates as
  the owner; `--cpus-per-gpu`, `--mem-per-gpu`. `<log_dir>/<name>.run.json` remembers
  where they are (for the OOM check and the log, across restarts);
- jobs from before revision 0003: output `<log_dir>/jps-<job_id>-<attempt>.out`
  (stdout and stderr), the service's environment less its JPUSHARE_* settings. `log_dir`
  must be visible from the compute nodes and from the service (a shared file system);
- every job gets JPUSHARE_JOB_ID, JPUSHARE_ATTEMPT, JPUSHARE_JOB_NAME, JPUSHARE_NODE, as
  with the local executor;
- GRES types <-> tiers: `gpu_type_to_tier` (GRES type -> tier name), owned here alone; a
  type that is not in it is its own tier name. `inventory` reports tier names (the
  dispatcher never sees a GRES type); `submit` accepts a tier name or a GRES type in
  `spec.gpu_type`;
- LLM backfill (`slurm_backfill`): jobs of the backfill partition (`backfill_partition`)
  are preempted by Slurm for research jobs; `inventory` leaves the GPUs they hold out of
  `used` (they are free for research, SPEC §1) and out of the node's partitions;
- a run squeue has forgotten (it ended more than `MinJobAge` ago, e.g. while the service
  was down): `lost_run` asks `sacct`; where accounting is disabled (no slurmdbd: sacct
  exits 1 "Slurm accounting storage is disabled") or has no record, the run is reported
  FAILED with "its outcome is unknown" — never as a node failure, whose requeue could run
  a job that may have completed a second time.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC
from pathlib import Path

from jpushare.executors.base import (
    GpuGroup,
    LaunchSpec,
    RunInfo,
    RunState,
    SubmitRefused,
)
from jpushare.executors.cuda_oom import CUDA_OOM_REASON, OOM_SCAN_BYTES, find_cuda_oom
from jpushare.executors.output_files import (
    LOG_TAIL_BYTES,
    OutputUnreadable,
    cannot_enter,
    file_size,
    output_paths,
    read_tail,
)
from jpushare.executors.slurm_backfill import DEFAULT_PARTITION, SlurmBackfill, backfill_gpus
from jpushare.executors.slurm_commands import (
    ALREADY_GONE,
    TRANSIENT,
    CommandResult,
    CommandRunner,
    SlurmCommands,
    SlurmError,
    run_command,
)
from jpushare.executors.slurm_parse import (
    SACCT_FORMAT,
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    SlurmJob,
    find_host_oom,
    parse_run_name,
    parse_sacct,
    parse_sbatch,
    parse_sinfo,
    parse_squeue,
    run_name,
    run_state,
    sbatch_error,
)
from jpushare.executors.slurm_run_records import UntrustedRecord, read_run_record, write_run_record
from jpushare.unix_accounts import (
    UnixAccount,
    UnknownAccount,
    can_switch_accounts,
    resolve_account,
    service_account,
)

# Job ids go into a Slurm job name and a file name: keep them to a safe alphabet.
_JOB_ID = re.compile(r"[A-Za-z0-9_.:+-]+")


class SlurmExecutor:
    """Runs JPU-Share jobs as Slurm batch jobs pinned to one node and GPU type."""

    def __init__(
        self,
        log_dir: Path | str,
        *,
        gpu_type_to_tier: Mapping[str, str] | None = None,
        name_prefix: str = "jps",
        commands: SlurmCommands | None = None,
        sbatch_args: Sequence[str] = (),
        submit_as_user: bool | None = None,
        timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
        runner: CommandRunner = run_command,
        backfill_partition: str | None = DEFAULT_PARTITION,
    ) -> None:
        """
        log_dir: where job output goes; must be readable here and writable on the nodes.
        gpu_type_to_tier: GRES type -> tier name where they differ (`{"a100": "a100-80g"}`).
        name_prefix: first word of the Slurm job names (one per JPU-Share installation).
        commands: paths to sbatch/squeue/sinfo/scancel.
        sbatch_args: extra sbatch options for every job (`--account=lab`, `--mem-per-gpu=…`).
        submit_as_user: pass `--uid/--gid` of `spec.unix_user` (root or SlurmUser; Slurm
            <= 23.02) so the job runs as its owner; otherwise jobs run as the service's
            user. None: when this process is root.
        timeout_s: how long one Slurm command may take.
        env: environment for the commands (default: this process's), e.g. SLURM_CONF.
        runner: how commands run (tests pass a fake).
        backfill_partition: the partition of the LLM backfill jobs research jobs preempt
            (None: none); a cluster without it simply has no backfill jobs.
        """
        self.log_dir = Path(log_dir)
        self.name_prefix = name_prefix
        self.commands = commands or SlurmCommands()
        self.sbatch_args = tuple(sbatch_args)
        self.submit_as_user = can_switch_accounts() if submit_as_user is None else submit_as_user
        self.timeout_s = timeout_s
        self._runner = runner
        self._gpu_type_to_tier = dict(gpu_type_to_tier or {})
        self._tier_to_gpu_type: dict[str, str] = {}
        for gres_type, tier in self._gpu_type_to_tier.items():
            if tier in self._tier_to_gpu_type:
                raise ValueError(
                    f"tier {tier!r} is mapped from two GRES types: "
                    f"{self._tier_to_gpu_type[tier]!r} and {gres_type!r}"
                )
            self._tier_to_gpu_type[tier] = gres_type
        # sbatch hands its environment to the job: keep the service's own settings
        # (JPUSHARE_DATABASE_URL ...) out of it, as the local executor does.
        base_env = {
            k: v
            for k, v in (os.environ if env is None else env).items()
            if not k.startswith("JPUSHARE_")
        }
        # sbatch's environment becomes the job's: leave its TZ alone there.
        self._submit_env = base_env
        # Slurm prints local times without a zone: make "local" UTC so they parse exactly
        # (no DST fold), and the standard ISO format whatever the user configured.
        self._env = {**base_env, "TZ": "UTC0", "SLURM_TIME_FORMAT": "standard"}
        # What sbatch itself needs from the service's environment for a job with its own.
        self._sbatch_needs = {k: v for k, v in base_env.items() if k in ("SLURM_CONF", "PATH")}
        self.backfill = SlurmBackfill(self, backfill_partition) if backfill_partition else None

    # ------------------------------------------------------------------ commands

    def _run(
        self,
        argv: Sequence[str],
        stdin: str | None = None,
        *,
        submit: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run one Slurm command; SlurmError if it cannot run or times out."""
        if env is None:
            env = self._submit_env if submit else self._env
        try:
            return self._runner(argv, stdin, env, self.timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{argv[0]} timed out after {self.timeout_s:g} s") from exc
        except OSError as exc:
            raise SlurmError(f"cannot run {argv[0]}: {exc}") from exc

    def _checked(self, argv: Sequence[str]) -> str:
        result = self._run(argv)
        if result.returncode != 0:
            msg = result.stderr.strip() or result.stdout.strip()
            raise SlurmError(f"{' '.join(argv[:2])} failed (rc {result.returncode}): {msg}")
        return result.stdout

    def _squeue(self, *args: str) -> list[SlurmJob]:
        # Our jobs run as our user unless submitted as their owners: then look at all.
        scope = () if self.submit_as_user else ("--me",)
        argv = [self.commands.squeue, "-h", "-t", "all", *scope, *args, "-O", SQUEUE_FORMAT]
        out = self._checked(argv)
        return parse_squeue(out, UTC)

    # ------------------------------------------------------------------ mapping

    def tier_of(self, gres_type: str) -> str:
        """The tier name a GRES type's GPUs belong to: the mapping, else the type itself."""
        return self._gpu_type_to_tier.get(gres_type, gres_type)

    def gres_type(self, gpu_type: str) -> str:
        """The GRES type to ask sbatch for: a tier name mapped back, else the name itself."""
        return self._tier_to_gpu_type.get(gpu_type, gpu_type)

    def gres(self, gpu_type: str, num_gpus: int) -> str:
        """sbatch's `--gres` for `num_gpus` of `gpu_type`: `gpu:<type>:N`, untyped `gpu:N`."""
        gres_type = self.gres_type(gpu_type)
        return f"gpu:{gres_type}:{num_gpus}" if gres_type != "gpu" else f"gpu:{num_gpus}"

    def log_path(self, job_id: str, attempt: int) -> Path:
        """Where the run's stdout and stderr go."""
        return self.log_dir / f"{run_name(self.name_prefix, job_id, attempt)}.out"

    # ------------------------------------------------------------------ Executor

    def inventory(self) -> list[GpuGroup]:
        """One group per node and GRES type; `used` counts every job's GPUs (`GresUsed`)
        but those the backfill partition's jobs hold (`GpuGroup.backfill`: Slurm preempts
        them for a research job, so they are free for it, SPEC §1).

        The backfill jobs are read before and after sinfo, and only those in both are
        taken out: a backfill job that started or ended between the reads may or may not
        be in GresUsed, and counting it busy is the safe side (a cycle's delay at worst;
        taking out GPUs sinfo did not count would hand a research job GPUs someone holds).
        """
        before = self._backfill_holding()
        out = self._checked([self.commands.sinfo, "-h", "-N", "-O", SINFO_FORMAT])
        nodes = parse_sinfo(out)
        after = self._backfill_holding() if before else {}
        held = backfill_gpus(
            (job for sid, job in after.items() if sid in before),
            {n.name: tuple(n.gpus) for n in nodes},
        )
        hidden = (self.backfill.partition,) if self.backfill else ()
        groups: list[GpuGroup] = []
        for node in nodes:
            for gres_type, total in sorted(node.gpus.items(), key=lambda kv: kv[0] or ""):
                used = min(node.gpus_used.get(gres_type, 0), total)
                backfill = min(held.get((node.name, gres_type), 0), used)
                groups.append(
                    GpuGroup(
                        node=node.name,
                        gpu_type=self.tier_of(gres_type or "gpu"),  # untyped GRES: `gpu:N`
                        total=total,
                        used=used - backfill,
                        state=node.state,
                        partitions=tuple(p for p in node.partitions if p not in hidden),
                        backfill=backfill,
                    )
                )
        return groups

    def _backfill_holding(self) -> dict[str, SlurmJob]:
        """Slurm id -> job, of the backfill partition's jobs holding GPUs now."""
        if self.backfill is None:
            return {}
        return {j.slurm_id: j for j in self.backfill.holding()}

    def submit(self, spec: LaunchSpec) -> str:
        """sbatch the run pinned to its placement, unless a run of that name exists already.

        Refused (SubmitRefused) when the owner's account does not exist here or its working
        directory cannot be entered by it, or when Slurm refuses the job."""
        if not _JOB_ID.fullmatch(spec.job_id):
            raise ValueError(f"job id {spec.job_id!r} has characters a Slurm job name cannot hold")
        name = run_name(self.name_prefix, spec.job_id, spec.attempt)
        existing = self._find_job(name)
        if existing is not None:
            return existing.slurm_id
        self.log_dir.mkdir(parents=True, exist_ok=True)
        account = self._account(spec)
        env: Mapping[str, str] | None = None
        job_env: Mapping[str, str] = {}
        if spec.workdir is None:
            where = [f"--output={self.log_path(spec.job_id, spec.attempt)}"]
            if account is not None:  # not the service's environment under another account
                env, job_env = self._sbatch_env(), self._job_env(spec, account)
        else:
            where = self._owner_run(spec, account, name)
            env, job_env = self._sbatch_env(), self._job_env(spec, account)
        argv = [
            self.commands.sbatch,
            "--parsable",
            f"--job-name={name}",
            f"--comment=jpushare job={spec.job_id} attempt={spec.attempt}",
            f"--nodelist={spec.node}",
            "--nodes=1",
            "--ntasks=1",
            f"--gres={self.gres(spec.gpu_type, spec.num_gpus)}",
            *where,
            "--no-requeue",
        ]
        if spec.partition:
            argv.append(f"--partition={spec.partition}")
        if spec.time_limit_s is not None:
            argv.append(f"--time={max(1, math.ceil(spec.time_limit_s / 60))}")
        if account is not None:
            argv += [f"--uid={account.uid}", f"--gid={account.gid}"]
        elif self.submit_as_user and spec.user and spec.workdir is None:
            argv.append(f"--uid={spec.user}")  # a job from before revision 0003
        if spec.cpus_per_gpu is not None:
            argv.append(f"--cpus-per-gpu={spec.cpus_per_gpu}")
        if spec.mem_per_gpu_mb is not None:
            argv.append(f"--mem-per-gpu={spec.mem_per_gpu_mb}M")
        argv.extend(self.sbatch_args)
        script = "".join(
            [
                "#!/bin/bash\n",
                *(
                    f"export {k}={shlex.quote(v)}\n"
                    for k, v in job_env.items()
                    if k not in _BASH_READONLY
                ),
                f"export JPUSHARE_JOB_ID={shlex.quote(spec.job_id)}\n",
                f"export JPUSHARE_ATTEMPT={spec.attempt}\n",
                f"export JPUSHARE_JOB_NAME={shlex.quote(spec.name)}\n",
                f"export JPUSHARE_NODE={shlex.quote(spec.node)}\n",
                f"{spec.command}\n",
            ]
        )
        result = self._run(argv, script, submit=True, env=env)
        if result.returncode != 0:
            message = sbatch_error(result.stderr or result.stdout)
            if TRANSIENT.search(result.stderr):
                raise SlurmError(f"sbatch failed: {message}")
            # A refused job can still get an id and a FAILED/BadConstraints record;
            # find()/runs() skip those, so nothing is left behind.
            raise SubmitRefused(f"Slurm refused the job: {message}")
        try:
            return parse_sbatch(result.stdout)
        except ValueError as exc:
            raise SlurmError(str(exc)) from exc

    def _account(self, spec: LaunchSpec) -> UnixAccount | None:
        """The owner's account when jobs run as their owners (None: the service's)."""
        if not self.submit_as_user or spec.unix_user is None:
            return None
        try:
            return resolve_account(spec.unix_user)
        except UnknownAccount as exc:
            raise SubmitRefused(str(exc)) from exc

    def _owner_run(self, spec: LaunchSpec, account: UnixAccount | None, name: str) -> list[str]:
        """--chdir, --output, --error of a job with a working directory, after checking as
        its owner that it can enter the directory; remembers the files in `<name>.run.json`."""
        assert spec.workdir is not None
        why = cannot_enter(spec.workdir, account)
        if why is not None:
            raise SubmitRefused(why)
        files = output_paths(spec.workdir, spec.output, spec.error, spec.job_id, spec.attempt)
        record = {
            "output": files.output,
            "error": files.error,
            "output_offset": file_size(files.output),
            "error_offset": 0 if files.error is None else file_size(files.error),
            "account": None if account is None else account.name,
        }
        self._write_run_record(name, record)
        args = [
            f"--chdir={spec.workdir}",
            f"--output={_slurm_escaped(files.output)}",
            "--open-mode=append",
        ]
        if files.error is not None:
            args.append(f"--error={_slurm_escaped(files.error)}")
        return args

    def _job_env(self, spec: LaunchSpec, account: UnixAccount | None) -> dict[str, str]:
        """The environment of a job with its own: the job's (less Slurm's input variables,
        which would not be the job's own in an sbatch job either) and the account's login
        variables. It travels in the batch script (`export` lines), never as sbatch's own
        environment: sbatch runs as the service (root), and the submitter's PATH would
        choose the program it runs, LD_PRELOAD load their code into it."""
        env = {
            k: v
            for k, v in (spec.environment or {}).items()
            if not k.startswith(("SBATCH_", "SLURM_", "SALLOC_", "SRUN_"))
        }
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env |= (account or service_account()).login_env()
        return env

    def _sbatch_env(self) -> dict[str, str]:
        """sbatch's own environment for a job with its own: what sbatch needs (the
        service's PATH and SLURM_CONF), nothing of the service's settings or the job's.
        sbatch hands its umask to the job as SLURM_UMASK unless that is set: the owner's
        output files are not for other users (0600), whatever the service's umask."""
        env = {"PATH": self._sbatch_needs.get("PATH", "/usr/local/bin:/usr/bin:/bin")}
        if "SLURM_CONF" in self._sbatch_needs:
            env["SLURM_CONF"] = self._sbatch_needs["SLURM_CONF"]
        env["SLURM_UMASK"] = "0077"
        return env

    def _run_record_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.run.json"

    def _write_run_record(self, name: str, record: Mapping[str, object]) -> None:
        write_run_record(self._run_record_path(name), record)

    def _read_run_record(self, job_id: str, attempt: int) -> dict[str, object] | None:
        return read_run_record(self._run_record_path(run_name(self.name_prefix, job_id, attempt)))

    def runs(self) -> list[RunInfo]:
        """Every Slurm job named by this executor that squeue still shows (MinJobAge)."""
        out: list[RunInfo] = []
        for job in self._squeue():
            key = parse_run_name(job.name, self.name_prefix)
            if key is None or job.refused:
                continue
            out.append(self._run_info(job, *key))
        return sorted(out, key=lambda r: (r.job_id, r.attempt, int(r.executor_id)))

    def find(self, job_id: str, attempt: int) -> RunInfo | None:
        job = self._find_job(run_name(self.name_prefix, job_id, attempt))
        return None if job is None else self._run_info(job, job_id, attempt)

    def cancel(self, executor_id: str) -> None:
        """scancel; a job that has already ended or is unknown is fine (idempotent)."""
        result = self._run([self.commands.scancel, executor_id])
        if result.returncode != 0 and not ALREADY_GONE.search(result.stderr):
            raise SlurmError(f"scancel {executor_id} failed: {result.stderr.strip()}")

    def log(self, job_id: str, attempt: int) -> str:
        """The run's output: its owner's file read as the owner, or the log in log_dir."""
        texts = self._tails(job_id, attempt, LOG_TAIL_BYTES, from_start=True, error=False)
        return texts[0] if texts else ""

    def lost_run(self, job_id: str, attempt: int, executor_id: str) -> RunInfo:
        """What became of Slurm job `executor_id`, which squeue no longer shows.

        sacct's record if accounting has one (same id and job name: ids restart when a
        controller's state is wiped); else a FAILED run whose outcome is unknown, ended
        now. Raises SlurmError only when sacct did not answer (timeout): the dispatcher
        asks again next cycle.
        """
        name = run_name(self.name_prefix, job_id, attempt)
        argv = [self.commands.sacct, "-j", executor_id, "-n", "-P", "-X", "-o", SACCT_FORMAT]
        try:
            result = self._run(argv)
        except SlurmError as exc:
            if not isinstance(exc.__cause__, OSError):
                raise
            result = CommandResult(127, "", str(exc))  # no sacct here: as good as disabled
        if result.returncode != 0:
            why = result.stderr.strip() or result.stdout.strip() or f"rc {result.returncode}"
            return self._unknown(
                job_id,
                attempt,
                executor_id,
                f"Slurm no longer knows job {executor_id} and accounting is unavailable "
                f"(sacct: {why}); its outcome is unknown, so it is not run again",
            )
        for job in parse_sacct(result.stdout, UTC):
            if job.slurm_id == executor_id and job.name == name:
                return self._run_info(job, job_id, attempt)
        return self._unknown(
            job_id,
            attempt,
            executor_id,
            f"Slurm no longer knows job {executor_id} and its accounting has no record of "
            f"{name}; its outcome is unknown, so it is not run again",
        )

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _unknown(job_id: str, attempt: int, executor_id: str, reason: str) -> RunInfo:
        """A run that is gone without a trace: FAILED, ended when we noticed."""
        return RunInfo(
            job_id=job_id,
            attempt=attempt,
            executor_id=executor_id,
            state=RunState.FAILED,
            reason=reason,
        )

    def _find_job(self, name: str) -> SlurmJob | None:
        """The newest Slurm job with this exact name that sbatch did not refuse."""
        jobs = [j for j in self._squeue(f"--name={name}") if j.name == name and not j.refused]
        if not jobs:
            return None
        return max(jobs, key=lambda j: int(re.sub(r"\D.*", "", j.slurm_id) or 0))

    def _log_tail(self, job_id: str, attempt: int) -> str:
        """This attempt's last output and error, for the OOM check."""
        return "\n".join(self._tails(job_id, attempt, OOM_SCAN_BYTES, from_start=False))

    def _tails(
        self, job_id: str, attempt: int, limit: int, *, from_start: bool, error: bool = True
    ) -> list[str]:
        """The ends of the run's output (and error) files, this attempt's part unless
        `from_start`; read as their owner where the job ran as one."""
        try:
            record = self._read_run_record(job_id, attempt)
        except UntrustedRecord:
            return []
        account: UnixAccount | None = None
        files: list[tuple[str, int]]
        if record is None:  # before revision 0003: our own log
            files = [(str(self.log_path(job_id, attempt)), 0)]
        else:
            files = [(str(record["output"]), _int(record.get("output_offset")))]
            if error and record.get("error") is not None:
                files.append((str(record["error"]), _int(record.get("error_offset"))))
            if record.get("account") is not None and can_switch_accounts():
                try:
                    account = resolve_account(str(record["account"]))
                except UnknownAccount:
                    return []
        out = []
        for path, offset in files:
            try:
                tail = read_tail(path, account, limit, 0 if from_start else offset)
            except OutputUnreadable:
                continue
            if tail is not None:
                out.append(tail.data.decode(errors="replace"))
        return out

    def _run_info(self, job: SlurmJob, job_id: str, attempt: int) -> RunInfo:
        state = run_state(job.state)
        detail = f"Slurm {job.state}" + (f" ({job.reason})" if job.reason else "")
        if job.exit is not None and state in (RunState.FAILED, RunState.OOM):
            if job.exit.signal:
                detail += f", killed by signal {job.exit.signal}"
            else:
                detail += f", exit code {job.exit.code}"
        if state is RunState.FAILED:
            # A CUDA OOM is a plain non-zero exit to Slurm; without cgroups so is a host
            # OOM. Both escalate the tier (SPEC §5).
            tail = self._log_tail(job_id, attempt)
            # The reason is a fixed sentence, never the job's output (it may hold anything).
            if find_cuda_oom(tail) is not None:
                state = RunState.OOM
                detail += f"; {CUDA_OOM_REASON}"
            elif find_host_oom(tail) is not None:
                state = RunState.OOM
                detail += "; out of memory: its memory limit was reached (reported in its output)"
        started = state is not RunState.PENDING and job.nodes is not None
        return RunInfo(
            job_id=job_id,
            attempt=attempt,
            executor_id=job.slurm_id,
            state=state,
            node=job.nodes,
            started_at=job.started_at if started else None,
            ended_at=job.ended_at if state.ended else None,
            exit_code=job.exit.shell_code if state.ended and job.exit is not None else None,
            reason=detail,
        )


# Variables bash will not take from `export` (it would print an error into the job's output).
_BASH_READONLY = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"})


def _slurm_escaped(path: str) -> str:
    """A file name sbatch takes literally: its own %-patterns (%j, %u, %N …) escaped. (A
    name with a backslash is already taken literally, %% included, by sbatch.)"""
    return path if "\\" in path else path.replace("%", "%%")


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
