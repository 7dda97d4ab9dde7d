"""Vocabulary of the embedded WebShop catalog: product types, attributes, options, phrasing.

Written for marft (not taken from the WebShop files). Five top-level categories like the
original small setting (beauty, electronics, fashion, garden, grocery), six product types each.
A product type lists its attribute phrases (a product gets 3-5 of them), its option groups (a
product gets 1-2 groups with a few values each), a price range and "use" phrases for titles.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    """A kind of product the generator can make."""

    category: str
    """Top-level category (``beauty`` ...)."""
    noun: str
    """The product noun phrase used in titles, goals and queries (``"shampoo"``)."""
    crumbs: tuple[str, ...]
    """Category breadcrumb, broad to narrow."""
    attributes: tuple[str, ...]
    """Attribute phrases products of this type may have."""
    options: tuple[str, ...]
    """Option group names (pools in :data:`OPTION_POOLS`)."""
    price: tuple[float, float]
    """Price range in dollars."""
    uses: tuple[str, ...] = ()
    """Title endings (``"for dry hair"``)."""


def _t(category, noun, crumbs, attributes, options, price, uses=""):
    split = lambda text: tuple(s.strip() for s in text.split(",") if s.strip())  # noqa: E731
    return ProductType(category, noun, tuple(crumbs.split(" > ")), split(attributes), split(options), price, split(uses))


OPTION_POOLS: dict[str, tuple[str, ...]] = {
    "color": ("black", "white", "grey", "navy", "red", "pink", "beige", "brown", "green", "purple",
              "blue", "ivory", "khaki", "olive", "burgundy", "teal", "silver", "gold", "yellow", "orange"),
    "size": ("x-small", "small", "medium", "large", "x-large", "xx-large"),
    "shoe size": ("6", "7", "8", "9", "10", "11", "12", "13"),
    "volume": ("2 fl oz", "4 fl oz", "8 fl oz", "16 fl oz", "32 fl oz"),
    "weight": ("3 ounce", "6 ounce", "12 ounce", "1 pound", "2 pound", "5 pound"),
    "count": ("2 pack", "4 pack", "10 pack", "24 pack", "60 count", "120 count"),
    "scent": ("lavender", "eucalyptus", "vanilla", "coconut", "citrus", "unscented", "peppermint", "sandalwood"),
    "flavor": ("chocolate", "strawberry", "salted caramel", "original", "honey", "cinnamon", "mango", "matcha"),
    "length": ("3 feet", "6 feet", "10 feet", "15 feet"),
    "capacity": ("32gb", "64gb", "128gb", "256gb"),
    "style": ("modern", "rustic", "minimalist", "farmhouse", "industrial", "bohemian"),
    "material": ("cotton", "linen", "bamboo", "wool", "polyester", "leather"),
}

# How an instruction asks for a value of each option group ("{v}" is the value).
OPTION_PHRASES: dict[str, str] = {
    "color": "in {v} color", "size": "in size {v}", "shoe size": "in size {v}", "volume": "in the {v} size",
    "weight": "in the {v} size", "count": "in a {v}", "scent": "with the {v} scent",
    "flavor": "in {v} flavor", "length": "that is {v} long", "capacity": "with {v} of storage",
    "style": "in the {v} style", "material": "made of {v}",
}

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # -- beauty --
    _t("beauty", "shampoo", "Beauty & Personal Care > Hair Care > Shampoo & Conditioner > Shampoos",
       "sulfate free, paraben free, tea tree, argan oil, color safe, dandruff relief, curly hair, "
       "volumizing formula, salon quality, vegan formula, dry scalp", "volume, scent", (6, 34), "for dry hair, for men and women, for daily use"),
    _t("beauty", "face serum", "Beauty & Personal Care > Skin Care > Face > Serums",
       "vitamin c, hyaluronic acid, anti aging, fine lines, dark spots, oil free, fragrance free, "
       "sensitive skin, retinol blend, cruelty free, fast absorbing", "volume", (9, 48), "for face, for all skin types"),
    _t("beauty", "lip balm", "Beauty & Personal Care > Skin Care > Lip Care > Balms & Moisturizers",
       "shea butter, beeswax, spf protection, long lasting, natural ingredients, chapped lips, "
       "travel size, tinted finish, vegan formula, non sticky", "count, flavor", (3, 16), "for dry lips, set"),
    _t("beauty", "makeup brush set", "Beauty & Personal Care > Tools & Accessories > Makeup Brushes & Tools > Brush Sets",
       "synthetic bristles, soft bristles, travel case, easy clean, cruelty free, wooden handle, "
       "foundation brush, eyeshadow blending, dense fibers, shed free", "color, count", (8, 42), "with case, for beginners"),
    _t("beauty", "nail polish", "Beauty & Personal Care > Foot, Hand & Nail Care > Nail Art & Polish > Nail Polish",
       "quick dry, long lasting, gel effect, chip resistant, non toxic, high gloss, vegan formula, "
       "easy apply, salon finish", "color, count", (4, 22), "for women, kit"),
    _t("beauty", "body lotion", "Beauty & Personal Care > Skin Care > Body > Moisturizers > Lotions",
       "dry skin, shea butter, fast absorbing, non greasy, fragrance free, cocoa butter, aloe vera, "
       "sensitive skin, long lasting, dermatologist tested", "volume, scent", (5, 28), "for dry skin, for whole body"),
    # -- electronics --
    _t("electronics", "bluetooth speaker", "Electronics > Portable Audio & Video > Portable Speakers & Docks > Portable Bluetooth Speakers",
       "waterproof design, long battery life, deep bass, wireless bluetooth, hands free calling, "
       "stereo sound, usb charging, built in microphone, shockproof body, outdoor use", "color", (19, 129), "for outdoor, for home and travel"),
    _t("electronics", "phone charger", "Electronics > Cell Phones & Accessories > Accessories > Chargers & Power Adapters > Wall Chargers",
       "fast charging, usb c, dual port, compact design, overheat protection, foldable plug, "
       "power delivery, universal compatibility, travel adapter", "color, length", (9, 45), "for iphone and android, with cable"),
    _t("electronics", "wireless earbuds", "Electronics > Headphones, Earbuds & Accessories > Earbuds > In-Ear Headphones",
       "noise cancelling, wireless bluetooth, charging case, sweat resistant, touch control, "
       "long battery life, deep bass, built in microphone, hands free calling, low latency", "color", (22, 159), "for running, for iphone and android"),
    _t("electronics", "hdmi cable", "Electronics > Accessories & Supplies > Audio & Video Accessories > Cables > HDMI Cables",
       "high speed, 4k resolution, gold plated, braided cord, ethernet support, ultra hd, "
       "plug and play, audio return channel, durable connectors", "length, count", (6, 29), "for tv, for gaming console"),
    _t("electronics", "memory card", "Electronics > Computers & Accessories > Memory Cards > Micro SD Cards",
       "high speed, 4k video recording, waterproof design, shockproof body, sd adapter, "
       "full hd, temperature proof, fast transfer, reliable storage", "capacity, count", (7, 59), "for camera, for nintendo switch"),
    _t("electronics", "smart watch", "Electronics > Wearable Technology > Smartwatches",
       "heart rate monitor, sleep tracking, waterproof design, long battery life, touch screen, "
       "step counter, bluetooth calling, blood oxygen, fitness tracker, gps tracking", "color, size", (29, 199), "for men and women, for android and ios"),
    # -- fashion --
    _t("fashion", "t-shirt", "Clothing, Shoes & Jewelry > Men > Clothing > Shirts > T-Shirts",
       "short sleeve, crew neck, machine wash, cotton blend, regular fit, soft fabric, "
       "breathable fabric, tagless label, relaxed fit, classic fit", "color, size", (8, 35), "for men, for summer"),
    _t("fashion", "running shoes", "Clothing, Shoes & Jewelry > Women > Shoes > Athletic > Running",
       "rubber sole, non slip, memory foam, arch support, lace up, lightweight design, "
       "breathable mesh, shock absorbing, wide toe box", "shoe size, color", (29, 139), "for women, for walking and gym"),
    _t("fashion", "yoga pants", "Clothing, Shoes & Jewelry > Women > Clothing > Active > Leggings",
       "high waist, tummy control, four way stretch, moisture wicking, squat proof, hidden pocket, "
       "elastic waistband, butt lifting, quick drying", "color, size", (14, 49), "for women, for workout"),
    _t("fashion", "winter jacket", "Clothing, Shoes & Jewelry > Men > Clothing > Jackets & Coats > Down Jackets",
       "water resistant, hooded design, zipper closure, windproof shell, warm lining, packable design, "
       "machine wash, fleece lined, multiple pockets", "color, size", (39, 189), "for men, for cold weather"),
    _t("fashion", "leather belt", "Clothing, Shoes & Jewelry > Men > Accessories > Belts",
       "genuine leather, alloy buckle, adjustable fit, gift box, classic style, ratchet buckle, "
       "casual and dress, durable stitching", "color, size", (12, 59), "for men, for jeans"),
    _t("fashion", "wool socks", "Clothing, Shoes & Jewelry > Women > Clothing > Socks & Hosiery > Casual Socks",
       "merino wool, cushioned sole, moisture wicking, thermal warmth, breathable fabric, "
       "reinforced heel, odor resistant, crew length", "count, size", (9, 36), "for hiking, for winter"),
    # -- garden (home & kitchen) --
    _t("garden", "throw pillow cover", "Home & Kitchen > Bedding > Decorative Pillows, Inserts & Covers > Throw Pillow Covers",
       "living room, hidden zipper, machine wash, soft velvet, double sided, farmhouse decor, "
       "fade resistant, sofa decor, square shape", "color, count", (8, 32), "for couch, for bedroom"),
    _t("garden", "coffee table", "Home & Kitchen > Furniture > Living Room Furniture > Tables > Coffee Tables",
       "living room, solid wood, metal frame, storage shelf, easy assembly, mid century, "
       "tempered glass, lift top, sturdy construction", "color, style", (59, 329), "for living room, for small spaces"),
    _t("garden", "led desk lamp", "Home & Kitchen > Lighting & Ceiling Fans > Lamps & Shades > Desk Lamps",
       "dimmable light, usb charging, eye caring, touch control, adjustable arm, energy saving, "
       "color temperature, home office, memory function", "color", (15, 69), "for home office, for reading"),
    _t("garden", "shower curtain", "Home & Kitchen > Bath > Bathroom Accessories > Shower Curtains",
       "waterproof fabric, machine wash, mildew resistant, weighted hem, rust proof grommets, "
       "quick drying, extra long, bathroom decor", "color, size", (9, 39), "for bathroom, with hooks"),
    _t("garden", "garden hose", "Patio, Lawn & Garden > Watering Equipment > Garden Hoses",
       "kink free, heavy duty, brass fittings, expandable design, leak proof, lightweight design, "
       "spray nozzle, uv resistant, easy storage", "length, color", (19, 89), "for yard, for car washing"),
    _t("garden", "storage bins", "Home & Kitchen > Storage & Organization > Baskets, Bins & Containers > Storage Bins",
       "foldable design, sturdy handles, closet organizer, fabric bins, lid included, stackable design, "
       "clear window, nursery storage, easy clean", "color, count", (12, 49), "for shelves, for closet"),
    # -- grocery --
    _t("grocery", "green tea", "Grocery & Gourmet Food > Beverages > Tea > Green Tea",
       "usda organic, caffeine free, non gmo, individually wrapped, loose leaf, antioxidant rich, "
       "gluten free, kosher certified, sugar free", "count, flavor", (5, 29), "bags, for iced tea"),
    _t("grocery", "protein bars", "Grocery & Gourmet Food > Snacks & Sweets > Nutrition Bars > Protein Bars",
       "high protein, gluten free, low sugar, keto friendly, non gmo, plant based, "
       "individually wrapped, high fiber, dairy free", "flavor, count", (12, 45), "snack, for workout"),
    _t("grocery", "coffee beans", "Grocery & Gourmet Food > Beverages > Coffee > Whole Coffee Beans",
       "whole bean, medium roast, dark roast, fair trade, single origin, usda organic, "
       "small batch, low acid, arabica beans", "weight, flavor", (9, 39), "for espresso, for french press"),
    _t("grocery", "olive oil", "Grocery & Gourmet Food > Pantry Staples > Cooking & Baking > Oils > Olive Oil",
       "extra virgin, cold pressed, first harvest, non gmo, glass bottle, usda organic, "
       "kosher certified, gluten free, single origin", "volume, count", (8, 49), "for cooking, for salad dressing"),
    _t("grocery", "trail mix", "Grocery & Gourmet Food > Snacks & Sweets > Nuts & Seeds > Trail Mix",
       "resealable bag, gluten free, high protein, non gmo, roasted nuts, no added sugar, "
       "individually wrapped, vegan snack, kosher certified", "weight, flavor", (6, 32), "snack, for hiking"),
    _t("grocery", "pasta sauce", "Grocery & Gourmet Food > Pantry Staples > Sauces, Gravies & Marinades > Pasta Sauces",
       "no added sugar, non gmo, gluten free, slow simmered, vine ripened tomatoes, low sodium, "
       "glass jar, vegan friendly, keto friendly", "weight, count", (4, 24), "for pasta, for pizza"),
)

BRAND_SYLLABLES: tuple[str, ...] = (
    "lu", "mo", "ra", "ve", "ki", "zo", "ta", "ne", "or", "bel", "sa", "vi", "qu", "ex", "no", "pri",
    "dal", "fen", "gro", "hal", "ion", "jem", "kor", "lin", "mar", "nix", "oli", "pax", "ren", "sol",
)

INSTRUCTION_OPENINGS: tuple[str, ...] = (
    "i am looking for {item}", "i need {item}", "find me {item}", "i want to buy {item}",
    "i'm searching for {item}", "please get me {item}",
)

DESCRIPTION_OPENINGS: tuple[str, ...] = (
    "Meet the {brand} {noun}.", "The {brand} {noun} is made for everyday life.",
    "Designed by {brand}, this {noun} is built to last.", "{brand} brings you a {noun} you can rely on.",
)

REVIEW_LINES: tuple[tuple[str, int, str], ...] = (
    ("Works as described", 5, "Exactly what I was looking for, would buy again."),
    ("Good value", 4, "Nice quality for the price, shipping was quick."),
    ("Decent", 3, "It is okay. Does the job but nothing special."),
    ("Not for me", 2, "The quality was lower than I expected."),
)
