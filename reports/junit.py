"""JUnit XML for CI: one testsuite per tier, one testcase per SLO verdict; an invalid run is an error."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from rushhour.audit.judged import JUDGED_CHECK
from rushhour.audit.summary import Summary, Verdict
from rushhour.reports import fmt, sentences

# Characters XML 1.0 forbids even when escaped.
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_safe(text: str) -> str:
    """Text that is legal inside XML 1.0."""
    return _XML_BAD.sub("\ufffd", text)


def _timestamp(summary: Summary) -> str:
    """ISO timestamp without zone (the form JUnit schemas accept), or the raw text."""
    start = fmt.anchor(summary)
    return start.strftime("%Y-%m-%dT%H:%M:%S") if start else ""


def _case(suite: ET.Element, classname: str, verdict: Verdict) -> ET.Element:
    """A testcase for one verdict, with a failure element when it failed."""
    case = ET.SubElement(suite, "testcase", {"name": xml_safe(verdict.check), "classname": classname, "time": "0"})
    if verdict.vacuous:
        # judged nothing: neither a pass nor a failure (a NOT JUDGED tier's `judged` case fails the suite)
        ET.SubElement(case, "skipped", {"message": xml_safe(verdict.message)})
    elif not verdict.passed:
        # an inconclusive check is not a pass: it fails the case, typed so CI can tell it apart
        kind = ("not_judged" if verdict.check == JUDGED_CHECK else "inconclusive") if verdict.inconclusive else "slo"
        failure = ET.SubElement(case, "failure", {"message": xml_safe(verdict.message), "type": kind})
        failure.text = xml_safe(
            f"tier {verdict.tier}: {verdict.check} threshold {fmt.check_value(verdict.check, verdict.threshold)}, "
            f"observed {fmt.check_value(verdict.check, verdict.observed)}"
            + (f", 95 % bound {fmt.check_value(verdict.check, verdict.bound)}" if verdict.judge == "bound" else "")
            + f" (judged on the {'confidence bound' if verdict.judge == 'bound' else 'point estimate'})"
        )
    out = ET.SubElement(case, "system-out")
    out.text = xml_safe(verdict.message)
    return case


def _suite(root: ET.Element, name: str, summary: Summary) -> ET.Element:
    """An empty testsuite element with the run's timestamp."""
    attrs = {
        "name": xml_safe(name),
        "tests": "0",
        "failures": "0",
        "errors": "0",
        "skipped": "0",
        "time": f"{summary.run.duration_s:.3f}",
        "timestamp": _timestamp(summary),
        "hostname": "rushhour",
    }
    if not attrs["timestamp"]:
        del attrs["timestamp"]
    return ET.SubElement(root, "testsuite", attrs)


def _count(suite: ET.Element) -> tuple[int, int, int, int]:
    """Write tests/failures/errors/skipped (vacuous checks) onto a suite and return them."""
    cases = suite.findall("testcase")
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return len(cases), failures, errors, skipped


def render_junit(summary: Summary) -> str:
    """The JUnit XML document as text."""
    root = ET.Element("testsuites", {"name": xml_safe(f"rushhour {summary.run.scenario} {summary.run.run_id}")})
    tiers = [t.name for t in summary.tiers]
    tiers += sorted({v.tier for v in summary.verdicts} - set(tiers))
    for name in tiers:
        suite = _suite(root, f"rushhour.{name}", summary)
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("scenario", summary.run.scenario),
            ("run_id", summary.run.run_id),
            ("target", summary.run.target),
            ("profile", summary.run.profile),
        ):
            ET.SubElement(props, "property", {"name": key, "value": xml_safe(value)})
        for verdict in summary.verdicts:
            if verdict.tier == name:
                _case(suite, f"rushhour.{name}", verdict)
        if not suite.findall("testcase"):
            suite.remove(props)
    if not summary.validity.valid:
        suite = _suite(root, "rushhour.run", summary)
        case = ET.SubElement(suite, "testcase", {"name": "validity", "classname": "rushhour.run", "time": "0"})
        error = ET.SubElement(
            case, "error", {"message": xml_safe(sentences.verdict_line(summary)), "type": "invalid_run"}
        )
        error.text = xml_safe("\n".join(summary.validity.reasons) or "the run is invalid")
    totals = [_count(s) for s in root.findall("testsuite")]
    root.set("tests", str(sum(t[0] for t in totals)))
    root.set("failures", str(sum(t[1] for t in totals)))
    root.set("errors", str(sum(t[2] for t in totals)))
    root.set("time", f"{summary.run.duration_s:.3f}")
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
