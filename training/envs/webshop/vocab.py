"""Word lists of the generated WebShop catalogue: WebShop's five product categories, product types with
their search query and category breadcrumb, attribute phrases and option values.

The categories are WebShop's (beauty, electronics, fashion, food, furniture; Yao et al., 2022, section 3);
the types, attributes and option values are a small hand-written list in the style of its product pages,
not its scraped catalogue. No phrase contains a no-effect template of the feedback labels
(:data:`ocsd.environments.labels.NO_EFFECT_TEMPLATES`), so product text never reads as a rejected action.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BRANDS", "CATEGORIES", "ProductType", "TYPES", "all_attributes"]

CATEGORIES = ("beauty", "electronics", "fashion", "food", "furniture")
"""WebShop's five product categories (Yao et al., 2022, section 3), the task types of the environment."""


@dataclass(frozen=True)
class ProductType:
    """A kind of product: what it is called, how it is searched for, where it sits, what it can be.

    Attributes
    ----------
    category : str
        One of :data:`CATEGORIES`.
    noun : str
        What the product is (``"hair extension"``), used in titles and instructions.
    query : str
        WebShop's search-query field of the product (its leaf category, lower case).
    breadcrumb : str
        Category path, levels joined by `` › ``.
    attributes : tuple of str
        Attribute phrases a product of this type may have.
    options : tuple of (str, tuple of str)
        Option names with the values a product may offer.
    price : (float, float)
        Range of prices, in dollars.
    """

    category: str
    noun: str
    query: str
    breadcrumb: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]


_B_ATTR = ("paraben free", "sulfate free", "cruelty free", "long lasting", "natural ingredients", "sensitive skin",
           "dry skin", "easy to use", "travel size", "alcohol free", "fragrance free", "high quality")
_E_ATTR = ("noise cancelling", "high speed", "fast charging", "water resistant", "easy to carry", "long battery life",
           "plug and play", "hands free", "easy install", "high definition", "usb port", "aluminum alloy")
_F_ATTR = ("machine wash", "relaxed fit", "slim fit", "rubber sole", "moisture wicking", "button closure",
           "elastic waistband", "long sleeve", "quality materials", "hand wash", "daily wear", "non slip")
_D_ATTR = ("gluten free", "sugar free", "non gmo", "keto friendly", "dairy free", "low carb", "shelf stable",
           "high protein", "ready to eat", "natural flavors", "low calorie", "individually wrapped")
_H_ATTR = ("easy assembly", "living room", "solid wood", "space saving", "wood finish", "storage space",
           "metal legs", "easy clean", "mid century", "bedroom furniture", "high density", "heavy duty")

_COLORS = ("black", "white", "navy blue", "grey", "red", "pink", "green", "beige", "brown", "purple")
_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")
_SHOES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "10", "11")
_FLAVORS = ("original", "chocolate", "vanilla", "strawberry", "sea salt", "barbecue", "honey", "peanut butter")
_PACKS = ("pack of 1", "pack of 2", "pack of 3", "pack of 6", "pack of 12")
_FLUID = ("2 fl oz", "4 fl oz", "8 fl oz", "16 fl oz", "3.4 fl oz")
_LENGTH = ("3ft", "6ft", "10ft", "15ft")
_BED = ("twin", "full", "queen", "king")


def _t(category, noun, query, crumbs, attributes, options, price):
    return ProductType(category, noun, query, " › ".join(crumbs), attributes, options, price)


_BEAUTY = ("Beauty & Personal Care",)
_ELEC = ("Electronics",)
_FASH = ("Clothing, Shoes & Jewelry",)
_FOOD = ("Grocery & Gourmet Food",)
_HOME = ("Home & Kitchen", "Furniture")

TYPES = (
    _t("beauty", "hair extension", "hair extensions, wigs & accessories",
       _BEAUTY + ("Hair Care", "Hair Extensions, Wigs & Accessories"), _B_ATTR,
       (("color", _COLORS[:6]), ("size", ("14 inch", "18 inch", "22 inch"))), (12, 60)),
    _t("beauty", "shampoo", "shampoos", _BEAUTY + ("Hair Care", "Shampoo & Conditioner"), _B_ATTR,
       (("size", _FLUID), ("scent", ("lavender", "coconut", "citrus", "unscented"))), (6, 35)),
    _t("beauty", "face serum", "face care", _BEAUTY + ("Skin Care", "Face"), _B_ATTR, (("size", _FLUID),), (9, 70)),
    _t("beauty", "lipstick", "lip makeup", _BEAUTY + ("Makeup", "Lips"), _B_ATTR,
       (("color", ("red", "pink", "nude", "coral", "plum", "rose")),), (5, 30)),
    _t("beauty", "body lotion", "body care", _BEAUTY + ("Skin Care", "Body"), _B_ATTR,
       (("size", _FLUID), ("scent", ("lavender", "shea", "vanilla", "unscented"))), (5, 40)),
    _t("electronics", "bluetooth speaker", "portable speakers", _ELEC + ("Portable Audio & Video", "Speakers"), _E_ATTR,
       (("color", _COLORS[:5]),), (15, 150)),
    _t("electronics", "hdmi cable", "hdmi cables", _ELEC + ("Accessories & Supplies", "Cables", "HDMI Cables"),
       _E_ATTR, (("size", _LENGTH), ("color", ("black", "white", "grey"))), (6, 40)),
    _t("electronics", "wireless earbuds", "earbud headphones", _ELEC + ("Headphones", "Earbud Headphones"), _E_ATTR,
       (("color", _COLORS[:4]),), (20, 180)),
    _t("electronics", "usb charger", "chargers", _ELEC + ("Accessories & Supplies", "Chargers"), _E_ATTR,
       (("style", ("single port", "dual port", "4 port")), ("color", ("black", "white"))), (8, 50)),
    _t("electronics", "security camera", "video surveillance", _ELEC + ("Camera & Photo", "Video Surveillance"),
       _E_ATTR, (("size", ("1 camera", "2 cameras", "4 cameras")),), (25, 250)),
    _t("fashion", "sweatpants", "women's pants", _FASH + ("Women", "Clothing", "Pants"), _F_ATTR,
       (("color", _COLORS), ("size", _SIZES)), (15, 50)),
    _t("fashion", "running shoe", "men's running shoes", _FASH + ("Men", "Shoes", "Athletic", "Running"), _F_ATTR,
       (("color", _COLORS[:6]), ("size", _SHOES)), (30, 120)),
    _t("fashion", "hoodie", "men's hoodies", _FASH + ("Men", "Clothing", "Hoodies"), _F_ATTR,
       (("color", _COLORS), ("size", _SIZES)), (18, 60)),
    _t("fashion", "t-shirt", "women's tops, tees & blouses", _FASH + ("Women", "Clothing", "Tops, Tees & Blouses"),
       _F_ATTR, (("color", _COLORS), ("size", _SIZES)), (8, 35)),
    _t("fashion", "sandal", "women's sandals", _FASH + ("Women", "Shoes", "Sandals"), _F_ATTR,
       (("color", _COLORS[:6]), ("size", _SHOES)), (15, 70)),
    _t("food", "protein bar", "protein bars", _FOOD + ("Snack Foods", "Bars", "Protein Bars"), _D_ATTR,
       (("flavor name", _FLAVORS[:5]), ("size", ("12 count", "24 count"))), (12, 45)),
    _t("food", "potato chips", "chips & crisps", _FOOD + ("Snack Foods", "Chips & Crisps"), _D_ATTR,
       (("flavor name", ("sea salt", "barbecue", "sour cream", "original", "jalapeno")), ("size", _PACKS)), (4, 30)),
    _t("food", "coffee beans", "roasted coffee beans", _FOOD + ("Beverages", "Coffee", "Whole Coffee Beans"), _D_ATTR,
       (("flavor name", ("dark roast", "medium roast", "light roast", "espresso")), ("size", ("12 ounce", "2 pound"))),
       (9, 45)),
    _t("food", "beef jerky", "jerky & dried meats", _FOOD + ("Meat & Seafood", "Jerky & Dried Meats"), _D_ATTR,
       (("flavor name", ("original", "teriyaki", "peppered", "sweet & hot")), ("size", _PACKS[:4])), (7, 40)),
    _t("food", "dark chocolate", "chocolate candy", _FOOD + ("Candy & Chocolate", "Chocolate"), _D_ATTR,
       (("flavor name", ("sea salt", "almond", "mint", "orange")), ("size", _PACKS[:4])), (5, 35)),
    _t("furniture", "ottoman bench", "ottomans", _HOME + ("Living Room Furniture", "Ottomans"), _H_ATTR,
       (("color", _COLORS[:8]), ("size", ("small", "medium", "large"))), (40, 300)),
    _t("furniture", "coffee table", "tables", _HOME + ("Living Room Furniture", "Tables"), _H_ATTR,
       (("color", ("walnut", "black", "white", "oak", "grey")),), (50, 400)),
    _t("furniture", "office chair", "home office chairs", _HOME + ("Home Office Furniture", "Chairs"), _H_ATTR,
       (("color", ("black", "grey", "white", "blue")),), (60, 350)),
    _t("furniture", "bed frame", "beds", _HOME + ("Bedroom Furniture", "Beds"), _H_ATTR,
       (("size", _BED), ("color", ("black", "white", "brown"))), (90, 600)),
    _t("furniture", "pillow cover", "decorative pillows", _HOME + ("Home Décor", "Decorative Pillows"), _H_ATTR,
       (("color", _COLORS), ("size", ("16x16 inch", "18x18 inch", "20x20 inch"))), (8, 40)),
)
"""The product types, five per category."""

BRANDS = ("Aurelle", "Brisko", "Calvora", "Dunmere", "Elvanta", "Fennick", "Garrow", "Halvey", "Istra", "Jorvik",
          "Kestrel", "Lumora", "Marden", "Norvell", "Orrin", "Pellam", "Quillon", "Rowan", "Sorrel", "Tarvin",
          "Ulmer", "Vessa", "Wyndel", "Yarrow", "Zephra")
"""Brand names of the generated products (invented)."""


def all_attributes() -> tuple[str, ...]:
    """Every attribute phrase of the generated catalogue, longest first (for matching inside instructions)."""
    return tuple(sorted({a for t in TYPES for a in t.attributes}, key=lambda a: (-len(a), a)))
