"""The scale profile on one machine: PostgreSQL and an S3 server on loopback, and the settings for them.

`python -m mindflow.scale up|down|env|demo` (`make demo-scale`, `make clean`). The servers are
the real ones: a PostgreSQL cluster of the OS package (initdb + pg_ctl, as the `postgres` user
when run as root, which PostgreSQL refuses to run as) holding the Dagster instance, and moto's
S3 server holding the LanceDB tables. mindflow itself only sees the settings (`env`), the same
ones an operator points at managed PostgreSQL and S3.

moto keeps objects in memory: `down` discards the LanceDB tables, so `demo` starts its home
afresh whenever the S3 server is new.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mindflow.errors import MindflowError

BUCKET = "mindflow"
DATABASE = "mindflow"
USER = "mindflow"
# moto accepts any credentials; these name the profile in its logs.
ACCESS_KEY, SECRET_KEY, REGION = "mindflow-scale", "mindflow-scale-secret", "us-east-1"
START_TIMEOUT_S = 60.0
# Pool `duckdb`'s limit on this profile unless MINDFLOW_DUCKDB_WRITERS says otherwise.
WRITERS = 4


@dataclass
class Profile:
    """The servers one `up` started, as recorded in `<root>/state.json`."""

    root: str
    pg_bin: str
    pg_data: str
    pg_port: int
    pg_password: str
    s3_port: int
    s3_pid: int

    @property
    def postgres_url(self) -> str:
        return f"postgresql+psycopg2://{USER}:{self.pg_password}@127.0.0.1:{self.pg_port}/{DATABASE}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self) -> dict[str, str]:
        """The settings that put mindflow on this profile (README: Running at scale)."""
        return {
            "MINDFLOW_DAGSTER_POSTGRES_URL": self.postgres_url,
            "MINDFLOW_LANCE_URI": f"s3://{BUCKET}/lance",
            "MINDFLOW_S3_ENDPOINT": self.s3_endpoint,
            "MINDFLOW_S3_REGION": REGION,
            "MINDFLOW_S3_ALLOW_HTTP": "true",
            # Patrols of different beings write at once, on checkouts of their rows (mindflow/checkout.py).
            "MINDFLOW_DUCKDB_WRITERS": os.environ.get("MINDFLOW_DUCKDB_WRITERS", str(WRITERS)),
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }


def default_root() -> Path:
    return Path(os.environ.get("MINDFLOW_HOME", "data")).expanduser().resolve() / "scale"


def postgres_bin() -> Path | None:
    """The folder of initdb and pg_ctl: MINDFLOW_PG_BIN, `pg_config --bindir`, or the newest
    /usr/lib/postgresql/<version>/bin (Debian keeps them off PATH)."""
    candidates = [os.environ.get("MINDFLOW_PG_BIN")]
    if shutil.which("pg_config"):
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(found.stdout.strip())
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version_key(p.parent.name))
    candidates.extend(str(p) for p in reversed(versions))
    for folder in filter(None, candidates):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_db_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its commands as the OS package's user."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("runuser") is None:
        raise MindflowError("running as root without runuser: start the scale profile as another user")
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        raise MindflowError(
            "running as root and there is no `postgres` user to run PostgreSQL as: "
            "create one (useradd postgres) or start the profile as another user"
        ) from None
    return ["runuser", "-u", "postgres", "--", *cmd]


def _hand_over(folder: Path) -> None:
    """As root, the folder belongs to `postgres`, who must also be able to reach it."""
    if os.geteuid() != 0:
        return
    shutil.chown(folder, "postgres", "postgres")
    check = subprocess.run(_as_db_user(["test", "-w", str(folder)]), check=False)
    if check.returncode != 0:
        raise MindflowError(
            f"the postgres user cannot reach {folder}: a parent folder is closed to other users; "
            "give the profile a folder it can reach (python -m mindflow.scale up --root /tmp/...)"
        )


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise MindflowError(f"{what} failed: {(done.stderr or done.stdout).strip()[-800:]}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def load(root: Path | None = None) -> Profile | None:
    """The profile `up` recorded under `root`, if its servers still run."""
    state = (root or default_root()) / "state.json"
    if not state.exists():
        return None
    profile = Profile(**json.loads(state.read_text()))
    if _alive(profile.s3_pid) and _listening(profile.s3_port) and _listening(profile.pg_port):
        return profile
    return None


def _start_postgres(root: Path, pg_bin: Path) -> tuple[Path, int, str]:
    cluster = root / "postgres"
    data = cluster / "data"
    cluster.mkdir(parents=True, exist_ok=True)
    _hand_over(cluster)
    password_file = cluster / "password"
    if not (data / "PG_VERSION").exists():
        password = secrets.token_hex(16)
        password_file.write_text(password + "\n")
        _hand_over(password_file)
        _run(
            _as_db_user(
                [str(pg_bin / "initdb"), "-D", str(data), "-U", USER, "--pwfile", str(password_file),
                 "-A", "scram-sha-256", "-E", "UTF8", "--no-sync"]
            ),
            "initdb",
        )  # fmt: skip
    password = password_file.read_text().strip()
    port = free_port()
    options = f"-p {port} -k {cluster} -c listen_addresses=127.0.0.1 -c fsync=off"
    _run(
        _as_db_user(
            [str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(cluster / "postgres.log"), "-w",
             "-t", str(int(START_TIMEOUT_S)), "-o", options, "start"]
        ),
        f"starting PostgreSQL (log: {cluster / 'postgres.log'})",
    )  # fmt: skip
    import psycopg2

    con = psycopg2.connect(host="127.0.0.1", port=port, user=USER, password=password, dbname="postgres")
    con.autocommit = True
    with con.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
        if cur.fetchone() is None:
            cur.execute(f"CREATE DATABASE {DATABASE}")  # a constant name, not user input
    con.close()
    return data, port, password


def _start_s3(root: Path) -> tuple[int, int]:
    port = free_port()
    log = open(root / "s3.log", "ab")  # noqa: SIM115 - the server's output, for as long as it runs
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # outlives this command, until `down`
    )
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _listening(port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise MindflowError(f"the S3 server did not start (log: {root / 's3.log'})")
        time.sleep(0.1)
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    s3.create_bucket(Bucket=BUCKET)
    return port, process.pid


def up(root: Path | None = None) -> tuple[Profile, bool]:
    """Start (or find running) the profile's servers under `root`; returns it and whether it is new."""
    root = (root or default_root()).resolve()
    running = load(root)
    if running is not None:
        return running, False
    down(root)  # whatever a crashed `up` left
    pg_bin = postgres_bin()
    if pg_bin is None:
        raise MindflowError(
            "PostgreSQL is not installed (no initdb/pg_ctl found): apt-get install postgresql, "
            "or set MINDFLOW_PG_BIN to the folder holding them"
        )
    for module in ("moto", "dagster_postgres", "psycopg2", "boto3"):
        if importlib.util.find_spec(module) is None:
            raise MindflowError(f"{module} is missing: pip install 'mindflow[scale]'")
    root.mkdir(parents=True, exist_ok=True)
    data, pg_port, password = _start_postgres(root, pg_bin)
    try:
        s3_port, s3_pid = _start_s3(root)
    except BaseException:
        _stop_postgres(pg_bin, data)
        raise
    profile = Profile(str(root), str(pg_bin), str(data), pg_port, password, s3_port, s3_pid)
    (root / "state.json").write_text(json.dumps(asdict(profile), indent=2) + "\n")
    return profile, True


def _stop_postgres(pg_bin: Path, data: Path) -> None:
    if (data / "postmaster.pid").exists():
        subprocess.run(
            _as_db_user([str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            check=False,
        )


def down(root: Path | None = None, purge: bool = False) -> bool:
    """Stop the servers `up` started under `root` (and with `purge` delete their files)."""
    root = (root or default_root()).resolve()
    state = root / "state.json"
    stopped = False
    if state.exists():
        profile = Profile(**json.loads(state.read_text()))
        _stop_postgres(Path(profile.pg_bin), Path(profile.pg_data))
        if _alive(profile.s3_pid):
            try:
                os.killpg(profile.s3_pid, signal.SIGTERM)  # its own session, started by `up`
            except ProcessLookupError:
                pass
        state.unlink()
        stopped = True
    if purge and root.exists():
        shutil.rmtree(root)
    return stopped


def _apply(profile: Profile, home: Path) -> dict[str, str]:
    env = {**os.environ, **profile.env(), "MINDFLOW_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    return env


def describe(profile: Profile, home: Path) -> str:
    """Where each store of the profile lives, and what it holds now."""
    from mindflow.config import Settings

    env = _apply(profile, home)
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        settings = Settings(_env_file=None)
        from mindflow import lance

        db = lance.connect(settings.lance_path)
        tables = {name: db.open_table(name).count_rows() for name in db.list_tables().tables}
    finally:
        os.environ.clear()
        os.environ.update(saved)
    import psycopg2

    con = psycopg2.connect(profile.postgres_url.replace("+psycopg2", ""))
    with con.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs")
        runs = cur.fetchone()[0]
    con.close()
    safe_url = profile.postgres_url.replace(f":{profile.pg_password}@", ":***@")
    lance_rows = ", ".join(f"{name} {rows:,}" for name, rows in sorted(tables.items())) or "none yet"
    return "\n".join(
        [
            "Where each store lives (scale profile):",
            f"  Dagster instance   PostgreSQL {safe_url} ({runs} runs; cluster {profile.pg_data})",
            f"  LanceDB tables     {settings.lance_path} at {profile.s3_endpoint} (moto): {lance_rows}",
            f"  relational stores  DuckDB {settings.duckdb_path} ({settings.duckdb_writers} runs write at"
            f" once, each being's steps on a checkout under {settings.checkouts};"
            " DuckLake not used, see README)",
            f"  inbox, workspace   {settings.inbox}, {settings.workspace}",
        ]
    )


def demo(root: Path | None = None) -> int:
    """`make demo-scale`: the profile up, `mindflow demo` on it, then where everything lives."""
    profile, new = up(root)
    home = Path(profile.root) / "home"
    if new and home.exists():
        shutil.rmtree(home)  # its published memories went with the last S3 server
    print(f"PostgreSQL on 127.0.0.1:{profile.pg_port}, S3 (moto) on {profile.s3_endpoint}", flush=True)
    command = [sys.executable, "-c", "from mindflow.entry import main; main()", "demo"]
    done = subprocess.run(command, env=_apply(profile, home))
    if done.returncode != 0:
        return done.returncode
    print("\n" + describe(profile, home))
    print(
        f"\nThe servers keep running: `eval $({sys.executable} -m mindflow.scale env)` points mindflow, "
        "`make dev` and `mindflow serve` at them; `make clean` stops them."
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mindflow.scale", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "env", "demo"])
    parser.add_argument("--root", type=Path, default=None, help="Where the servers keep their files.")
    parser.add_argument("--purge", action="store_true", help="down: delete the servers' files too.")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            profile, new = up(args.root)
            state = "started" if new else "already running"
            print(f"{state}: PostgreSQL on 127.0.0.1:{profile.pg_port}, S3 (moto) on {profile.s3_endpoint}")
        elif args.command == "down":
            print("stopped" if down(args.root, purge=args.purge) else "nothing running")
        elif args.command == "env":
            profile = load(args.root)
            if profile is None:
                raise MindflowError("the scale profile is not running: python -m mindflow.scale up")
            home = Path(profile.root) / "home"
            env = {**profile.env(), "MINDFLOW_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
            print("\n".join(f"export {key}={shlex.quote(value)}" for key, value in env.items()))
        else:
            return demo(args.root)
    except MindflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
