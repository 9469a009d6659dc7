"""The import-linter contract type paycore's domain rule needs (pyproject.toml,
`[tool.importlinter]`; run with `.venv/bin/lint-imports` from the repository root).

`domain_boundaries`: a domain uses another domain only through its front door — the modules
named in `public_modules` (e.g. `service`, `errors`, `types`) and the whole modules listed in
`public_extra` (e.g. the processor's port) — and a controller (`controllers`) never imports a
domain's `controller_forbidden` modules (its repository, models, lifecycle). Imports inside one
domain are free. The built-in contract types cannot say "only through `service`" for every pair
of domains without one contract per pair.
"""

from __future__ import annotations

from typing import Any, cast

import grimp
from importlinter import Contract, ContractCheck, fields, output


class DomainBoundaries(Contract):
    type_name = "domain_boundaries"

    domains = fields.ListField(subfield=fields.StringField())
    public_modules = fields.ListField(subfield=fields.StringField())
    public_extra = fields.ListField(subfield=fields.StringField(), required=False)
    controllers = fields.ListField(subfield=fields.StringField())
    controller_forbidden = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        domains: list[str] = list(self.domains)  # type: ignore[call-overload]
        public = set(self.public_modules)  # type: ignore[call-overload]
        extra: set[str] = set(cast("list[str] | None", self.public_extra) or [])
        controllers: list[str] = list(self.controllers)  # type: ignore[call-overload]
        forbidden = set(self.controller_forbidden)  # type: ignore[call-overload]
        illegal: list[dict[str, Any]] = []
        for importer in sorted(graph.modules):
            importer_domain = _owner(importer, domains)
            importer_controller = _owner(importer, controllers)
            if importer_domain is None and importer_controller is None:
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                domain = _owner(imported, domains)
                if domain is None or domain == importer_domain or imported in extra:
                    continue
                module = imported[len(domain) + 1 :].split(".")[0] if imported != domain else ""
                broken = (module not in public) if importer_domain else (module in forbidden)
                if broken:
                    details = graph.get_import_details(importer=importer, imported=imported)
                    lines = [detail["line_number"] for detail in details]
                    illegal.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not illegal, warnings=[], metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for link in check.metadata["illegal"]:
            lines = ", ".join(str(line) for line in link["lines"])
            output.print_error(f"- {link['importer']} -> {link['imported']} (l.{lines})", bold=False)
        output.new_line()


def _owner(module: str, packages: list[str]) -> str | None:
    for package in packages:
        if module == package or module.startswith(package + "."):
            return package
    return None
