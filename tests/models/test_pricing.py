"""PriceTable: built-in prices, lookup by model name, config merge, cost."""

from __future__ import annotations

import pytest

from reverie.core.messages import TokenUsage
from reverie.errors import ConfigError
from reverie.models.pricing import Price, PriceTable


def test_builtin_price_is_found_with_or_without_the_provider_prefix() -> None:
    table = PriceTable.default()
    price = table.price_for("gpt-4.1-mini")
    assert price == Price(input_per_mtok=0.40, output_per_mtok=1.60, cached_input_per_mtok=0.10)
    assert table.price_for("openai:gpt-4.1-mini") == price
    assert table.price_for("hermes:openai:gpt-4.1-mini") == price


def test_dated_snapshots_use_the_undated_price() -> None:
    table = PriceTable.default()
    assert table.price_for("anthropic:claude-sonnet-4-5-20250929") == table.price_for(
        "claude-sonnet-4-5"
    )
    assert table.price_for("gpt-4o-mini-2024-07-18") == table.price_for("gpt-4o-mini")
    assert table.price_for("gpt-4o-mini") != table.price_for("gpt-4o")


def test_unknown_model_has_no_price_and_no_cost() -> None:
    table = PriceTable.default()
    assert table.price_for("openai:gpt-unknown") is None
    assert table.cost("openai:gpt-unknown", TokenUsage(input_tokens=1)) is None
    assert "openai:gpt-unknown" not in table


def test_local_ollama_models_cost_nothing() -> None:
    table = PriceTable.default()
    assert table.cost("ollama:llama3", TokenUsage(input_tokens=10**6)) == 0.0
    assert table.cost("hermes:ollama:hermes3", TokenUsage(output_tokens=10**6)) == 0.0


def test_cost_is_per_million_tokens() -> None:
    table = PriceTable({"m": Price(input_per_mtok=2.0, output_per_mtok=10.0)})
    usage = TokenUsage(input_tokens=500_000, output_tokens=100_000)
    assert table.cost("m", usage) == pytest.approx(1.0 + 1.0)


def test_config_entries_merge_over_the_builtin_table() -> None:
    table = PriceTable.default().merged(
        {
            "gpt-4.1-mini": {"input_per_mtok": 1, "output_per_mtok": 2},
            "together:llama": Price(input_per_mtok=0.5, output_per_mtok=0.5),
            "openai-compat:http://box/v1#qwen": {"input_per_mtok": 0, "output_per_mtok": 0},
        }
    )
    assert table.price_for("openai:gpt-4.1-mini") == Price(input_per_mtok=1.0, output_per_mtok=2.0)
    assert table.price_for("together:llama") == Price(input_per_mtok=0.5, output_per_mtok=0.5)
    assert table.cost("openai-compat:http://box/v1#qwen", TokenUsage(input_tokens=9)) == 0.0
    assert PriceTable.default().price_for("gpt-4.1-mini") == Price(
        input_per_mtok=0.40, output_per_mtok=1.60, cached_input_per_mtok=0.10
    )


@pytest.mark.parametrize(
    "entry",
    [
        {"input_per_mtok": 1},
        {"input_per_mtok": 1, "output_per_mtok": "2"},
        {"input_per_mtok": 1, "output_per_mtok": 2, "cached": 0.1},
        {"input_per_mtok": -1, "output_per_mtok": 2},
        3.0,
    ],
)
def test_bad_config_entries_are_config_errors_naming_the_model(entry: object) -> None:
    with pytest.raises(ConfigError, match="my-model"):
        PriceTable().merged({"my-model": entry})  # type: ignore[dict-item]


def test_a_merged_table_answers_for_itself_after_its_base_was_asked() -> None:
    # Lookups are remembered per table: a table made from another never answers with the
    # other's remembered price.
    base = PriceTable.default()
    assert base.price_for("openai:gpt-4o-mini") == base.price_for("gpt-4o-mini")
    merged = base.merged({"gpt-4o-mini": Price(input_per_mtok=9.0, output_per_mtok=9.0)})
    assert merged.price_for("openai:gpt-4o-mini") == Price(input_per_mtok=9.0, output_per_mtok=9.0)
    assert base.price_for("openai:gpt-4o-mini") != merged.price_for("openai:gpt-4o-mini")
    assert base.price_for("my-custom-model") is None
    assert base.price_for("my-custom-model") is None
