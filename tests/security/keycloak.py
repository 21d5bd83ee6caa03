"""A real OAuth token issuer for the OAUTHBEARER tests: Keycloak, from Maven Central
(`org.keycloak:keycloak-quarkus-dist`, a zip fetched once with mvn into ``$SEGLOG_KEYCLOAK_CACHE``
or ``~/.cache/seglog-keycloak`` and unpacked there), started in dev mode on 127.0.0.1 with an
in-memory database, and stopped by the process id it started.

The test's realm is a JSON realm representation written here and imported through Keycloak's
admin API (POST /admin/realms) with the temporary admin the start-up creates: confidential
clients with the client-credentials grant and an audience mapper. `KeycloakUnavailable` says why
Keycloak could not be had (the caller skips)."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

KEYCLOAK_VERSION = os.environ.get("SEGLOG_KEYCLOAK_VERSION", "26.4.7")
START_TIMEOUT_S = float(os.environ.get("SEGLOG_KEYCLOAK_START_TIMEOUT", "420"))
ADMIN, ADMIN_PASSWORD = "admin", "admin-pw"
AUDIENCE = "seglog-broker"


class KeycloakUnavailable(RuntimeError):
    pass


def cache_dir() -> Path:
    base = os.environ.get("SEGLOG_KEYCLOAK_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "seglog-keycloak"


def distribution(version: str = KEYCLOAK_VERSION) -> Path:
    """The unpacked distribution (fetched and unpacked once per machine)."""
    root = cache_dir()
    home = root / f"keycloak-{version}"
    if (home / "bin" / "kc.sh").exists():
        return home
    if shutil.which("mvn") is None:
        raise KeycloakUnavailable("mvn is not installed (it fetches Keycloak from Maven Central)")
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / "bin" / "kc.sh").exists():
            return home
        archive = root / f"keycloak-quarkus-dist-{version}.zip"
        if not archive.exists():
            run = subprocess.run(["mvn", "-q", "-B", "dependency:copy",
                                  f"-Dartifact=org.keycloak:keycloak-quarkus-dist:{version}:zip",
                                  f"-DoutputDirectory={root}"], capture_output=True, text=True, timeout=900)
            if run.returncode != 0 or not archive.exists():
                raise KeycloakUnavailable(f"mvn could not fetch Keycloak {version}: {(run.stdout + run.stderr)[-800:]}")
        with zipfile.ZipFile(archive) as z:
            z.extractall(root)
        for script in (home / "bin").glob("*.sh"):
            script.chmod(0o755)
    return home


def client(client_id: str, *, audience: bool = True, **attributes: str) -> dict:
    """A confidential client with the client-credentials grant (its secret: `<id>-secret`)."""
    mappers = [{"name": "audience", "protocol": "openid-connect", "protocolMapper": "oidc-audience-mapper",
                "config": {"included.custom.audience": AUDIENCE, "access.token.claim": "true",
                           "id.token.claim": "false"}}] if audience else []
    return {"clientId": client_id, "enabled": True, "publicClient": False, "secret": f"{client_id}-secret",
            "serviceAccountsEnabled": True, "standardFlowEnabled": False, "directAccessGrantsEnabled": False,
            "protocol": "openid-connect", "protocolMappers": mappers, "attributes": attributes}


class Keycloak:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path):
        self.proc = proc
        self.port = port
        self.log = log
        self.base = f"http://127.0.0.1:{port}"
        self.started_in_s = 0.0

    @classmethod
    def start(cls, workdir: Path, port: int) -> "Keycloak":
        home = distribution()
        workdir.mkdir(parents=True, exist_ok=True)
        log = workdir / "keycloak.log"
        env = dict(os.environ, KC_BOOTSTRAP_ADMIN_USERNAME=ADMIN, KC_BOOTSTRAP_ADMIN_PASSWORD=ADMIN_PASSWORD,
                   JAVA_OPTS_KC_HEAP="-Xms64m -Xmx512m")
        started = time.monotonic()
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(home / "bin" / "kc.sh"), "start-dev", "--http-port", str(port),
                                     "--http-host", "127.0.0.1", "--db", "dev-mem"],
                                    stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir,
                                    start_new_session=True)
        kc = cls(proc, port, log)
        deadline = started + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise KeycloakUnavailable(f"Keycloak exited ({proc.returncode}): {log.read_text(errors='replace')[-1500:]}")
            if "Listening on:" in log.read_text(errors="replace"):
                kc.started_in_s = time.monotonic() - started
                return kc
            time.sleep(0.5)
        kc.stop()
        raise KeycloakUnavailable(f"Keycloak did not start within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        """SIGTERM to the process group it was started in (kc.sh and its JVM), by pid."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    # ------------------------------------------------------------------ the issuer
    def _post(self, path: str, data: bytes, headers: dict) -> bytes:
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.read()

    def import_realm(self, realm: dict) -> None:
        admin = self.token("master", "admin-cli", password=(ADMIN, ADMIN_PASSWORD))
        self._post("/admin/realms", json.dumps(realm).encode(),
                   {"Authorization": f"Bearer {admin}", "Content-Type": "application/json"})

    def token(self, realm: str, client_id: str, *, password: tuple[str, str] | None = None) -> str:
        """An access token: the client-credentials grant (secret `<id>-secret`), or the password
        grant of a user for a public client."""
        form = {"client_id": client_id}
        if password is None:
            form.update(grant_type="client_credentials", client_secret=f"{client_id}-secret")
        else:
            form.update(grant_type="password", username=password[0], password=password[1])
        body = self._post(f"/realms/{realm}/protocol/openid-connect/token", urllib.parse.urlencode(form).encode(),
                          {"Content-Type": "application/x-www-form-urlencoded"})
        return json.loads(body)["access_token"]

    def issuer(self, realm: str) -> str:
        return f"{self.base}/realms/{realm}"

    def token_endpoint(self, realm: str) -> str:
        return f"{self.issuer(realm)}/protocol/openid-connect/token"

    def jwks_endpoint(self, realm: str) -> str:
        return f"{self.issuer(realm)}/protocol/openid-connect/certs"
